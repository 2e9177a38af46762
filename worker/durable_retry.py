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
    (ferry-deliver-at T, ferry-target-topic <name>.retry, ferry-retry-attempts n,
    ferry-source-topic/-partition/-offset, ferry-source-cluster for a cluster other than
    default) → acknowledged: committed moves past it
    → at T in <name>.retry → pushed as attempt n + 1 → delivered, or deferred again,
    or dead-lettered (ferry-source-* still name where it was first read)

The retry topic is in the ``default`` Kafka cluster, whichever cluster a record was first read
in: ``ferry-source-cluster`` carries that cluster, so the copy is pushed with its
``ce-kafkacluster`` and dead-lettered in that cluster, as the record itself would be
(docs/zones.md). A portal redrive of another cluster's dead letters sets it the same way.

Every step is a write acknowledged before the previous copy is let go, so a crash anywhere
repeats an attempt and never loses one (at-least-once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ferry import delay, kafka, log
from ferry.config import CLUSTER_NAME_RE
from ferry.subscription import DEFAULT_CLUSTER, Subscription
from ferry.worker.producer import AsyncProducer
from ferry.worker.push import Record

_log = log.get_logger(__name__)
ATTEMPTS_HEADER = "ferry-retry-attempts"
"""On a record in ``<name>.retry``: the pushes already made (its next push is this + 1)."""
SOURCE = ("ferry-source-topic", "ferry-source-partition", "ferry-source-offset")
CLUSTER_HEADER = "ferry-source-cluster"
"""On a record in ``<name>.retry``: the Kafka cluster it was first read in, when not ``default``."""
ROUTING = frozenset({ATTEMPTS_HEADER, delay.DELIVER_AT_HEADER, delay.TARGET_TOPIC_HEADER, CLUSTER_HEADER, *SOURCE})
"""Headers Ferry sets on a deferred record; replaced, never doubled, when it is deferred again."""
Source = tuple[bytes, bytes, bytes]


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


def source_of(record: Record) -> Source | None:
    """Where a record of a retry topic was first read (its ``ferry-source-*`` headers)."""
    found = tuple(record.header(n) for n in SOURCE)
    if any(v is None for v in found):
        return None
    return found  # type: ignore[return-value]


def source_cluster(record: Record, own: str = DEFAULT_CLUSTER) -> str:
    """The Kafka cluster a record of a retry topic was first read in: its ``ferry-source-cluster``
    header, or ``own`` (the retry topic's cluster) without one. A value that is no cluster name
    is ignored: it would otherwise reach the endpoint as ``ce-kafkacluster``."""
    raw = record.header(CLUSTER_HEADER)
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
    return [] if kafka_cluster == DEFAULT_CLUSTER else [(CLUSTER_HEADER, kafka_cluster.encode())]


def deferred_headers(
    record: Record, retry_topic: str, attempts: int, due_ms: int, kafka_cluster: str = DEFAULT_CLUSTER
) -> list[tuple[str, bytes | None]]:
    """The headers of the copy written to the delay store: the record's own, where it was first
    read (topic, partition, offset and ``kafka_cluster``, the record's own Kafka cluster), the
    attempts made, and where and when the delay store delivers it."""
    source = source_of(record) if record.topic == retry_topic else None
    if source is None:
        source = (record.topic.encode(), str(record.partition).encode(), str(record.offset).encode())
    own = [(k, v) for k, v in record.headers if k.lower() not in ROUTING]
    return [
        *own,
        *zip(SOURCE, source, strict=True),
        *cluster_header(kafka_cluster),
        (ATTEMPTS_HEADER, str(attempts).encode()),
        (delay.DELIVER_AT_HEADER, str(due_ms).encode()),
        (delay.TARGET_TOPIC_HEADER, retry_topic.encode()),
    ]


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
        """``kafka_cluster``: the record's own Kafka cluster (its copy in the retry topic, in the
        default cluster, carries it). Raises :class:`ferry.worker.producer.ProduceFailed` when
        the broker did not take it."""
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
