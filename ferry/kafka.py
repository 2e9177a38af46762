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

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ferry.errors import FerryError


class KafkaUnavailable(FerryError):
    """The brokers could not be reached or did not answer in time."""


def ensure_topic(
    client_config: Mapping[str, Any],
    name: str,
    num_partitions: int,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 15.0,
) -> bool:
    """Create ``name`` unless it exists. Returns True when it was created here."""
    admin = AdminClient(dict(client_config))
    if name in admin.list_topics(timeout=timeout_s).topics:
        return False
    fut = admin.create_topics([NewTopic(name, num_partitions, 1, config=dict(config or {}))])[name]
    try:
        fut.result(timeout_s)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise KafkaUnavailable(f"cannot create topic {name!r}: {exc}") from None
    return True


def partition_counts(
    client_config: Mapping[str, Any], topics: Iterable[str], timeout_s: float = 10.0
) -> dict[str, int]:
    """Partitions of each existing topic among ``topics`` (missing topics are left out)."""
    admin = AdminClient(dict(client_config))
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaUnavailable(f"cannot list topics: {exc}") from None
    out: dict[str, int] = {}
    for t in topics:
        tm = meta.topics.get(t)
        if tm is not None and tm.error is None and tm.partitions:
            out[t] = len(tm.partitions)
    return out


def read_to_end(
    client_config: Mapping[str, Any],
    topic: str,
    on_message: Callable[[Message], None],
    start: Mapping[int, int] | None = None,
    timeout_s: float = 30.0,
    stop_at: Mapping[int, int] | None = None,
    consumer: Consumer | None = None,
) -> dict[int, int]:
    """Read every partition of ``topic`` from ``start`` (default: beginning) to its end.

    ``stop_at`` optionally gives, per partition, an offset to stop before. ``consumer`` (from
    :func:`reader`) is reused and left open: repeated reads then skip connecting to the brokers.
    Returns the end offset (high watermark) of each partition. Raises :class:`KafkaUnavailable`
    past the deadline.
    """
    owned = consumer is None
    if consumer is None:
        consumer = reader(client_config)
    ends: dict[int, int] = {}
    try:
        try:
            meta = consumer.list_topics(topic, timeout=min(timeout_s, 10.0)).topics.get(topic)
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot read metadata of {topic!r}: {exc}") from None
        if meta is None or meta.error is not None or not meta.partitions:
            return {}
        parts = range(len(meta.partitions))
        consumer.assign([TopicPartition(topic, p, (start or {}).get(p, OFFSET_BEGINNING)) for p in parts])
        waiting = set(parts)
        deadline = time.monotonic() + timeout_s
        while waiting:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"reading {topic!r} did not reach the end of partitions {sorted(waiting)}")
            # consume() waits out its timeout unless 500 arrive: short, so reaching the end is quick.
            for msg in consumer.consume(500, 0.01):
                p = cast(int, msg.partition())
                offset = cast(int, msg.offset())
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        ends[p] = offset
                        waiting.discard(p)
                        continue
                    raise KafkaUnavailable(f"reading {topic!r}: {err}")
                if p not in waiting:
                    continue
                if stop_at is not None and p in stop_at and offset >= stop_at[p]:
                    ends[p] = stop_at[p]
                    waiting.discard(p)
                    consumer.pause([TopicPartition(topic, p)])
                    continue
                on_message(msg)
    finally:
        if owned:
            consumer.close()
        else:
            consumer.unassign()
    return ends


def reader(client_config: Mapping[str, Any]) -> Consumer:
    """A consumer set up for :func:`read_to_end` (never joins a group; stops at partition EOF)."""
    cfg = dict(client_config)
    cfg.update(
        {
            "group.id": cfg.get("group.id", "ferry.reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 10,
        }
    )
    return Consumer(cfg)
