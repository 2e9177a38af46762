"""Durable retries: a record waiting for its next attempt waits in the delay store, not in memory.

Use case: a subscription with ``ordering: "none"`` and ``"retry": {"mode": "durable"}`` whose
endpoint fails some records for minutes. In memory mode each such record holds its place in the
partition's window (and the partition's ``committed`` offset) until its last attempt; a worker
that dies loses the wait and starts the attempts over. In durable mode the record leaves the
window at once: it is written to ``FERRY_DELAY_TOPIC`` to be delivered, when its retry is due, to
the subscription's own topic ``<name>.retry``, and is acknowledged in its partition as soon as the
broker has it. The worker that owns the retry topic's partition pushes it again, its ``ce-id``
unchanged and ``ce-ferryattempt`` counting on, and dead-letters it after ``max_attempts`` pushes in
all, as memory mode does.

A record's journey:

    read from its topic → push fails, a retry is due at T → written to the delay store
    (headers: Ferry's block — ferry-retry-attempts n, ferry-deliver-at T, ferry-target-topic
    <name>.retry, ferry-source-topic/-partition/-offset[/-cluster]/-timestamp — then the record's
    own headers, unchanged) → acknowledged: committed moves past it → at T in <name>.retry →
    :func:`original` takes the block off → pushed as attempt n + 1, exactly as the first push
    but for ``ce-ferryattempt`` → delivered, or deferred again, or dead-lettered (its dead letter
    names where it was first read)

The block comes first and always ends with ``ferry-source-timestamp``, so the record's own
headers after it pass on byte for byte, even ones named like Ferry's (a record the delay store
delivered to its topic carries its own ``ferry-deliver-at``); the delay store reads the first
``ferry-deliver-at`` / ``ferry-target-topic``, the block's.

The retry topic is in the ``default`` Kafka cluster, whichever cluster a record was first read
in: ``ferry-source-cluster`` carries that cluster, so the copy is pushed with its
``ce-kafkacluster`` and dead-lettered in that cluster, as the record itself would be
(docs/zones.md). A portal redrive of another cluster's dead letters sets it the same way.

Every step is a write acknowledged before the previous copy is let go, so a crash anywhere
repeats an attempt and never loses one (at-least-once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ferry import delay, kafka, log
from ferry.config import CLUSTER_NAME_RE
from ferry.subscription import DEFAULT_CLUSTER, SOURCE_CLUSTER_HEADER, Subscription
from ferry.worker.producer import AsyncProducer
from ferry.worker.push import Record

_log = log.get_logger(__name__)
ATTEMPTS_HEADER = "ferry-retry-attempts"
"""On a record in ``<name>.retry``: the pushes already made (its next push is this + 1)."""
SOURCE = ("ferry-source-topic", "ferry-source-partition", "ferry-source-offset")
TIMESTAMP_HEADER = "ferry-source-timestamp"
"""The first read's record timestamp (epoch ms); the last header of Ferry's block."""
ROUTING = frozenset(
    {
        ATTEMPTS_HEADER,
        delay.DELIVER_AT_HEADER,
        delay.TARGET_TOPIC_HEADER,
        *SOURCE,
        SOURCE_CLUSTER_HEADER,
        TIMESTAMP_HEADER,
    }
)
"""Headers Ferry sets on a deferred record; replaced, never doubled, when it is deferred again."""
INTERNAL = ROUTING | {"ferry-error", "ferry-attempts", "ferry-redriven-from"}
"""Ferry's headers on a record of a retry topic: a deferred copy's, or a redriven dead letter's
(docs/contract.md §4 and the portal's redrive). Never forwarded to the endpoint."""
Headers = Sequence[tuple[str, bytes | None]]


def prior_attempts(record: Record) -> int:
    """Pushes made before this copy of the record (0 for a record read from its own topic)."""
    raw = record.header(ATTEMPTS_HEADER)
    if raw is None:
        return 0
    try:
        n = int(raw)
    except ValueError:
        return 0
    return n if n > 0 else 0


def split(headers: Headers) -> tuple[dict[str, bytes | None], list[tuple[str, bytes | None]]]:
    """Ferry's headers (first of each name) and the record's own ones, of a retry topic's record.

    A deferred copy starts with Ferry's block (``ferry-retry-attempts`` first, the timestamp
    last) and the own headers follow as they were. Any other record (a redriven dead letter, a
    copy written before the block) has Ferry's headers mixed in: every :data:`INTERNAL` name goes.
    """
    block: Headers = ()
    own: Headers = headers
    if headers and headers[0][0].lower() == ATTEMPTS_HEADER:
        for i, (name, _) in enumerate(headers):
            if name.lower() == TIMESTAMP_HEADER:
                block, own = headers[: i + 1], headers[i + 1 :]
                break
    if not block:
        block = headers
        own = [(k, v) for k, v in headers if k.lower() not in INTERNAL]
    found: dict[str, bytes | None] = {}
    for name, value in block:
        if name.lower() in INTERNAL:
            found.setdefault(name.lower(), value)
    return found, list(own)


def source_cluster(record: Record, own: str = DEFAULT_CLUSTER) -> str:
    """The Kafka cluster a record of a retry topic was first read in: its ``ferry-source-cluster``
    header (Ferry's, see :func:`split`), or ``own`` (the retry topic's cluster) without one."""
    return _cluster_name(split(record.headers)[0].get(SOURCE_CLUSTER_HEADER), own)


def _cluster_name(raw: bytes | None, own: str) -> str:
    """A ``ferry-source-cluster`` value as a cluster name, else ``own``. A value that is no
    cluster name is ignored: it would otherwise reach the endpoint as ``ce-kafkacluster``."""
    if not raw:
        return own
    try:
        name = raw.decode("ascii")
    except UnicodeDecodeError:
        return own
    return name if CLUSTER_NAME_RE.fullmatch(name) else own


def cluster_header(kafka_cluster: str) -> list[tuple[str, bytes | None]]:
    """The ``ferry-source-cluster`` header a copy of a record of ``kafka_cluster`` carries (none
    for ``default``, so copies of the default cluster's records look as they always did)."""
    return [] if kafka_cluster == DEFAULT_CLUSTER else [(SOURCE_CLUSTER_HEADER, kafka_cluster.encode())]


class Original(NamedTuple):
    """A record as it was first read, and the Kafka cluster it was read from."""

    record: Record
    cluster: str


def original(record: Record, cluster: str = DEFAULT_CLUSTER) -> Original:
    """What a record of a retry topic was when first read: its topic, partition, offset and
    timestamp (from Ferry's headers) and its own headers, so that pushing it again looks exactly
    like its first push but for ``ce-ferryattempt`` (docs/contract.md §4). A record without
    readable ``ferry-source-*`` keeps its place; Ferry's headers go either way. ``cluster``: the
    retry topic's, unless ``ferry-source-cluster`` names the one it was first read in."""
    found, own = split(record.headers)
    cluster = _cluster_name(found.get(SOURCE_CLUSTER_HEADER), cluster)
    raw = tuple(found.get(n) for n in SOURCE)
    topic, partition, offset = raw
    try:
        if topic is None or partition is None or offset is None:
            raise ValueError("no source")
        where = (topic.decode("utf-8"), int(partition), int(offset))
    except (UnicodeDecodeError, ValueError):
        here = (record.topic, record.partition, record.offset)
        return Original(Record(*here, record.key, record.value, own, record.timestamp_ms), cluster)
    timestamp = record.timestamp_ms
    raw_ts = found.get(TIMESTAMP_HEADER)
    if raw_ts is not None and raw_ts.isdigit():
        timestamp = int(raw_ts)
    return Original(Record(*where, record.key, record.value, own, timestamp), cluster)


def deferred_headers(
    first: Record, retry_topic: str, attempts: int, due_ms: int, cluster: str = DEFAULT_CLUSTER
) -> list[tuple[str, bytes | None]]:
    """The headers of the copy written to the delay store for the record ``first`` as it was
    first read (see :func:`original`) from ``cluster``: Ferry's block — the attempts made, where
    and when the delay store delivers it, where it was first read — then its own headers."""
    block: list[tuple[str, bytes | None]] = [
        (ATTEMPTS_HEADER, str(attempts).encode()),
        (delay.DELIVER_AT_HEADER, str(due_ms).encode()),
        (delay.TARGET_TOPIC_HEADER, retry_topic.encode()),
        (SOURCE[0], first.topic.encode()),
        (SOURCE[1], str(first.partition).encode()),
        (SOURCE[2], str(first.offset).encode()),
        *cluster_header(cluster),
        (TIMESTAMP_HEADER, str(first.timestamp_ms).encode()),
    ]
    return [*block, *first.headers]


class Deferrals:
    """Writes records waiting for a retry to the delay store (in the default Kafka cluster, where
    the delay store and the retry topics live)."""

    def __init__(self, client_config: Mapping[str, Any], producer: AsyncProducer, delay_topic: str) -> None:
        self._cfg = dict(client_config)
        self._producer = producer
        self.delay_topic = delay_topic
        self._ready: set[str] = set()
        self.deferred = 0

    async def send(
        self, sub: Subscription, record: Record, attempts: int, due_ms: int, kafka_cluster: str = DEFAULT_CLUSTER
    ) -> None:
        """``record``: as first read (:func:`original`), from ``kafka_cluster``, the record's own
        Kafka cluster (its copy in the retry topic, in the default cluster, carries it). Raises
        :class:`ferry.worker.producer.ProduceFailed` when the broker did not take it."""
        if sub.retry_topic not in self._ready:
            # The delay store delivers to the retry topic: it must exist (auto-create may be off).
            await asyncio.to_thread(kafka.ensure_topic, self._cfg, sub.retry_topic, 1)
            self._ready.add(sub.retry_topic)
        headers = deferred_headers(record, sub.retry_topic, attempts, due_ms, kafka_cluster)
        await self._producer.send(self.delay_topic, record.value, record.key, headers)
        self.deferred += 1
        _log.info(
            "record.retry_deferred",
            subscription=sub.name,
            cluster=kafka_cluster,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            attempts=attempts,
            due_ms=due_ms,
        )
