"""Dead letters: records that cannot be delivered, kept with why, for browse and redrive.

A dead-letter record keeps the source record's key, value and headers and adds ``ferry-error``,
``ferry-attempts``, ``ferry-source-topic``, ``ferry-source-partition`` and
``ferry-source-offset`` (docs/contract.md §4), ``ferry-source-cluster`` for a record of a Kafka
cluster other than ``default`` (docs/zones.md), and ``ferry-source-timestamp`` (the record's
timestamp, epoch ms: a redriven copy is pushed with it as ``ce-time``). It goes to the dead-letter
topic of the record's own cluster, also for a copy read from the retry topic (in ``default``). It
is produced with the idempotent producer and the source record counts as acknowledged only once
the broker confirmed the dead letter; if the produce fails, the record stays unacknowledged and is
retried later (never silently dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ferry import kafka, log
from ferry.subscription import DEFAULT_CLUSTER, SOURCE_CLUSTER_HEADER
from ferry.worker.producer import AsyncProducer
from ferry.worker.push import Record

_log = log.get_logger(__name__)
ERROR_HEADER_MAX = 1000
SOURCE_HEADERS = (
    "ferry-error",
    "ferry-attempts",
    "ferry-source-topic",
    "ferry-source-partition",
    "ferry-source-offset",
    SOURCE_CLUSTER_HEADER,
    "ferry-source-timestamp",
    # A durable retry's routing (worker/durable_retry.py): not part of the record.
    "ferry-retry-attempts",
    "ferry-deliver-at",
    "ferry-target-topic",
)


def dead_letter_headers(
    record: Record,
    error: str,
    attempts: int,
    source: tuple[bytes, bytes, bytes] | None = None,
    kafka_cluster: str = DEFAULT_CLUSTER,
) -> list[tuple[str, bytes | None]]:
    """``record``: as first read (a record of a retry topic: :func:`ferry.worker.durable_retry.original`
    of it). ``source``: where it was first read, when that is not the record's own place;
    ``kafka_cluster``: the Kafka cluster it was first read in."""
    # A redriven record already carries ferry-* headers from its first failure: replace them.
    own = [(k, v) for k, v in record.headers if k.lower() not in SOURCE_HEADERS]
    if source is None:
        source = (record.topic.encode(), str(record.partition).encode(), str(record.offset).encode())
    return [
        *own,
        ("ferry-error", error[:ERROR_HEADER_MAX].encode()),
        ("ferry-attempts", str(attempts).encode()),
        ("ferry-source-topic", source[0]),
        ("ferry-source-partition", source[1]),
        ("ferry-source-offset", source[2]),
        *([] if kafka_cluster == DEFAULT_CLUSTER else [(SOURCE_CLUSTER_HEADER, kafka_cluster.encode())]),
        ("ferry-source-timestamp", str(record.timestamp_ms).encode()),
    ]


class DeadLetterSink:
    def __init__(self, client_config: Mapping[str, Any], producer: AsyncProducer) -> None:
        self._cfg = dict(client_config)
        self._producer = producer
        self._ready: set[str] = set()

    async def send(
        self,
        topic: str,
        record: Record,
        error: str,
        attempts: int,
        source: tuple[bytes, bytes, bytes] | None = None,
        kafka_cluster: str = DEFAULT_CLUSTER,
    ) -> None:
        if topic not in self._ready:
            # Brokers with auto-create off would make the produce wait forever: create it.
            await asyncio.to_thread(kafka.ensure_topic, self._cfg, topic, 1)
            self._ready.add(topic)
        headers = dead_letter_headers(record, error, attempts, source, kafka_cluster)
        await self._producer.send(topic, record.value, key=record.key, headers=headers)
        _log.info(
            "record.dead_lettered",
            cluster=kafka_cluster,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            dead_letter_topic=topic,
            attempts=attempts,
            error=error,
        )
