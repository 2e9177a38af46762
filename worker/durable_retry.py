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
    ferry-source-topic/-partition/-offset) → acknowledged: committed moves past it
    → at T in <name>.retry → pushed as attempt n + 1 → delivered, or deferred again,
    or dead-lettered (ferry-source-* still name where it was first read)

Every step is a write acknowledged before the previous copy is let go, so a crash anywhere
repeats an attempt and never loses one (at-least-once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ferry import delay, kafka, log
from ferry.subscription import Subscription
from ferry.worker.producer import AsyncProducer
from ferry.worker.push import Record

_log = log.get_logger(__name__)
ATTEMPTS_HEADER = "ferry-retry-attempts"
"""On a record in ``<name>.retry``: the pushes already made (its next push is this + 1)."""
SOURCE = ("ferry-source-topic", "ferry-source-partition", "ferry-source-offset")
ROUTING = frozenset({ATTEMPTS_HEADER, delay.DELIVER_AT_HEADER, delay.TARGET_TOPIC_HEADER, *SOURCE})
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


def deferred_headers(record: Record, retry_topic: str, attempts: int, due_ms: int) -> list[tuple[str, bytes | None]]:
    """The headers of the copy written to the delay store: the record's own, where it was first
    read, the attempts made, and where and when the delay store delivers it."""
    source = source_of(record) if record.topic == retry_topic else None
    if source is None:
        source = (record.topic.encode(), str(record.partition).encode(), str(record.offset).encode())
    own = [(k, v) for k, v in record.headers if k.lower() not in ROUTING]
    return [
        *own,
        *zip(SOURCE, source, strict=True),
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

    async def send(self, sub: Subscription, record: Record, attempts: int, due_ms: int) -> None:
        """Raises :class:`ferry.worker.producer.ProduceFailed` when the broker did not take it."""
        if sub.retry_topic not in self._ready:
            # The delay store delivers to the retry topic: it must exist (auto-create may be off).
            await asyncio.to_thread(kafka.ensure_topic, self._cfg, sub.retry_topic, 1)
            self._ready.add(sub.retry_topic)
        headers = deferred_headers(record, sub.retry_topic, attempts, due_ms)
        await self._producer.send(self.delay_topic, record.value, record.key, headers)
        self.deferred += 1
        _log.info(
            "record.retry_deferred",
            subscription=sub.name,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            attempts=attempts,
            due_ms=due_ms,
        )
