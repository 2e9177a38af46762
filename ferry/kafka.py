"""Small blocking Kafka helpers shared by the worker, the coordinator and the portal.

Call them from a thread (``asyncio.to_thread``) in async code. They never trust ListOffsets
for where a partition ends: they read to partition EOF, whose offset is the high watermark
carried by the fetch response. That is right on every broker, and the only right answer on
some embedded ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from ferry.errors import FerryError
from ferry.kafka_log import IDLE as IDLE_LOGS
from ferry.kafka_log import ClientLog, secret_values

__all__ = [
    "IDLE_LOGS",
    "KafkaUnavailable",
    "admin",
    "consumer",
    "ensure_topic",
    "partition_counts",
    "producer",
    "read_partitions_to_end",
    "read_to_end",
    "reader",
    "settings_problem",
]


class KafkaUnavailable(FerryError):
    """The brokers could not be reached or did not answer in time."""


# Every confluent-kafka client Ferry creates is made here (tests/unit/test_kafka_clients.py checks
# the source), so each one routes librdkafka's log into Ferry's (ferry.kafka_log). ``role`` names
# the client's job in its log lines.


def with_logger(client_config: Mapping[str, Any], role: str) -> dict[str, Any]:
    """``client_config`` plus a :class:`~ferry.kafka_log.ClientLog` as confluent-kafka's ``logger``
    (whatever ``logger`` the settings carried: no client may log in librdkafka's own format)."""
    cfg = dict(client_config)
    cfg["logger"] = ClientLog(role, cfg)
    return cfg


def consumer(client_config: Mapping[str, Any], role: str) -> Consumer:
    """Its log lines are handed over by ``poll()``/``consume()``: keep it polled, or see
    :data:`IDLE_LOGS`."""
    return Consumer(with_logger(client_config, role))


def producer(client_config: Mapping[str, Any], role: str) -> Producer:
    """Its log lines are handed over by ``poll()``/``flush()``."""
    return Producer(with_logger(client_config, role))


def admin(client_config: Mapping[str, Any], role: str = "admin") -> AdminClient:
    """Its log lines are handed over by ``poll()``: call ``poll(0)`` when done with it."""
    return AdminClient(with_logger(client_config, role))


def settings_problem(client_settings: Mapping[str, Any]) -> str | None:
    """What librdkafka refuses in ``client_settings`` (an unknown property, a value it cannot take),
    or None. Checked by configuring a producer with no brokers, which connects nowhere; what only
    creating a real client can tell (a SASL mechanism this build lacks, certificate files) is left
    to the clients, whose errors say it."""
    try:
        producer({k: v for k, v in client_settings.items() if k != "bootstrap.servers"}, "settings-check")
    except KafkaException as exc:
        text = str(exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else exc)
        if text.startswith("Failed to create"):
            return None
    except (TypeError, ValueError) as exc:
        text = str(exc)
    else:
        return None
    for secret in secret_values(client_settings):  # a refused value may be quoted in the message
        text = text.replace(secret, "***")
    return text


def ensure_topic(
    client_config: Mapping[str, Any],
    name: str,
    num_partitions: int,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 15.0,
) -> bool:
    """Create ``name`` unless it exists. Returns True when it was created here."""
    client = admin(client_config)
    try:
        try:
            existing = client.list_topics(timeout=timeout_s).topics
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot list topics: {exc.args[0].str() if exc.args else exc}") from None
        if name in existing:
            return False
        fut = client.create_topics([NewTopic(name, num_partitions, 1, config=dict(config or {}))])[name]
        try:
            fut.result(timeout_s)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            raise KafkaUnavailable(f"cannot create topic {name!r}: {exc}") from None
        return True
    finally:
        client.poll(0)  # hand over the log lines of the calls above


def partition_counts(
    client_config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 10.0
) -> dict[str, int]:
    """Partitions of each existing topic among ``topics`` (missing topics are left out)."""
    client = admin(client_config)
    try:
        meta = client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot list topics: {exc.args[0].str() if exc.args else exc}") from None
    finally:
        client.poll(0)  # hand over the log lines of the call above
    out: dict[str, int] = {}
    for t in topics:
        tm = meta.topics.get(t)
        if tm is not None and tm.error is None and tm.partitions:
            out[t] = len(tm.partitions)
    return out


TP = tuple[str, int]


def consume_ready(consumer: Consumer, max_messages: int, timeout_s: float) -> list[Message]:
    """Up to ``max_messages`` messages (and partition events): waits at most ``timeout_s`` for the
    first, then takes what has arrived without waiting. ``consume(n, timeout)`` instead waits out
    its whole timeout unless ``n`` messages come, which adds that timeout to every read of a quiet
    topic (a reader waiting for one entry to come back)."""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    if max_messages <= 1:
        return [first]
    return [first, *consumer.consume(max_messages - 1, 0)]


def read_partitions_to_end(
    consumer: Consumer,
    starts: Mapping[TP, int],
    on_message: Callable[[Message], None] | None = None,
    *,
    until: Callable[[Message], bool] | None = None,
    stop_at: Mapping[TP, int] | None = None,
    rewind_after_s: float | None = None,
    timeout_s: float = 30.0,
    ignore_errors: bool = False,
) -> dict[TP, int]:
    """Read each (topic, partition) of ``starts`` forward from its start offset (or
    ``OFFSET_BEGINNING``) to its end; returns where each ended. The end is the offset of partition
    EOF: the high watermark carried by the fetch response, never ListOffsets, which some brokers
    (the embedded one) answer wrongly. Every record read on the way goes to ``on_message``.

    - ``until``: a record for which it is true ends its partition there (result: its offset; it
      is not passed to ``on_message``).
    - ``stop_at``: per partition, an offset to stop before (result: that offset).
    - ``rewind_after_s``: the starts are only hints (a high watermark from ListOffsets, a
      committed offset) and may be past the end, from where such a broker never answers EOF: a
      partition that gave neither a record nor EOF within this many seconds is read again from its
      beginning. ``None``: the starts are positions to read on from, never rewound.
    - ``ignore_errors``: consumer errors other than EOF are skipped (the deadline still holds)
      instead of raising.

    ``consumer`` (from :func:`reader`) is left open and unassigned. Raises
    :class:`KafkaUnavailable` when a partition reaches no end within ``timeout_s``, or on a
    consumer error.
    """
    waiting = set(starts)
    quiet = set(starts)  # nothing read yet: a start past the end looks like this
    ends: dict[TP, int] = {}
    paused: list[TopicPartition] = []
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
    started = time.monotonic()
    rewound = rewind_after_s is None
    try:
        while waiting:
            elapsed = time.monotonic() - started
            if elapsed > timeout_s:
                raise KafkaUnavailable(f"partitions {sorted(waiting)} reached no end within {timeout_s:g} s")
            if not rewound and elapsed > cast(float, rewind_after_s):
                rewound = True
                if waiting & quiet:
                    # Assigning replaces the whole assignment: the others go on from where they are.
                    going = consumer.position([TopicPartition(t, p) for t, p in waiting - quiet])
                    consumer.assign([*(TopicPartition(t, p, OFFSET_BEGINNING) for t, p in waiting & quiet), *going])
            for msg in consume_ready(consumer, 1000, 0.05):
                tp = (cast(str, msg.topic()), cast(int, msg.partition()))
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if tp in waiting:
                            ends[tp] = cast(int, msg.offset())
                            waiting.discard(tp)
                        continue
                    if ignore_errors:
                        continue
                    raise KafkaUnavailable(f"reading {tp[0]}[{tp[1]}]: {err.str()}")
                if tp not in waiting:
                    continue
                quiet.discard(tp)
                offset = cast(int, msg.offset())
                if stop_at is not None and tp in stop_at and offset >= stop_at[tp]:
                    ends[tp] = stop_at[tp]
                elif until is not None and until(msg):
                    ends[tp] = offset
                else:
                    if on_message is not None:
                        on_message(msg)
                    continue
                waiting.discard(tp)
                paused.append(TopicPartition(*tp))
                consumer.pause(paused[-1:])
    finally:
        # A pause outlives unassign(): a reused reader would never fetch that partition again.
        if paused:
            consumer.resume(paused)
        consumer.unassign()
    return ends


def read_to_end(
    client_config: Mapping[str, Any],
    topic: str,
    on_message: Callable[[Message], None],
    start: Mapping[int, int] | None = None,
    timeout_s: float = 30.0,
    stop_at: Mapping[int, int] | None = None,
    consumer: Consumer | None = None,
) -> dict[int, int]:
    """Read every partition of ``topic`` from ``start`` (default: beginning) to its end
    (:func:`read_partitions_to_end`; the starts are positions, never rewound).

    ``stop_at`` optionally gives, per partition, an offset to stop before. ``consumer`` (from
    :func:`reader`) is reused and left open: repeated reads then skip connecting to the brokers.
    Returns the end offset (high watermark) of each partition. Raises :class:`KafkaUnavailable`
    past the deadline.
    """
    owned = consumer is None
    if consumer is None:
        consumer = reader(client_config)
    try:
        try:
            meta = consumer.list_topics(topic, timeout=min(timeout_s, 10.0)).topics.get(topic)
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot read metadata of {topic!r}: {exc}") from None
        if meta is None or meta.error is not None or not meta.partitions:
            return {}
        starts = {(topic, p): (start or {}).get(p, OFFSET_BEGINNING) for p in range(len(meta.partitions))}
        ends = read_partitions_to_end(
            consumer,
            starts,
            on_message,
            stop_at={(topic, p): o for p, o in (stop_at or {}).items()},
            timeout_s=timeout_s,
        )
        return {p: end for (_, p), end in ends.items()}
    finally:
        if owned:
            consumer.close()


def cached_high_watermark(consumer: Consumer, topic: str, partition: int) -> int | None:
    """The partition's high watermark as ``consumer``'s latest fetch saw it, without a request;
    None while none is known. Ask from the thread that consumes: asked from another thread while
    ``consume()`` ran, librdkafka did not return."""
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    except Exception:  # no fetch yet, or a closed consumer
        return None
    return int(high) if high >= 0 else None


def reader(client_config: Mapping[str, Any], role: str = "reader", fetch_wait_ms: int = 10) -> Consumer:
    """A consumer set up for :func:`read_to_end` (never joins a group; stops at partition EOF).
    Kept open between reads, it is left unassigned: :data:`IDLE_LOGS` may watch it. A consumer
    that follows a topic instead passes ``fetch_wait_ms`` (``FERRY_FETCH_WAIT_MAX_MS``)."""
    cfg = dict(client_config)
    cfg.update(
        {
            "group.id": cfg.get("group.id", "ferry.reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": fetch_wait_ms,
        }
    )
    return consumer(cfg, role)
