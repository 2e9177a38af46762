"""Kafka helpers for tests: create topics, produce keyed records, read offset states and group offsets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from ferry import kafka
from ferry.errors import OffsetRecordError
from ferry.offsets import OffsetState, decode_key, decode_value, fold
from ferry.subscription import PartitionRef


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        fut.result(15)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, int]],
    headers: list[tuple[str, bytes]] | None = None,
) -> int:
    """Produce (key, value, partition) records; returns how many."""
    p = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, "message.max.bytes": 2_000_000}
    )
    n = 0
    for key, value, partition in records:
        while True:
            try:
                p.produce(topic, key=key, value=value, partition=partition, headers=list(headers or []))
                break
            except BufferError:
                p.poll(0.1)
        n += 1
    assert p.flush(30) == 0, "broker did not confirm every produced record"
    return n


def offset_states(bootstrap: str, offsets_topic: str) -> dict[PartitionRef, OffsetState | None]:
    """What a new owner would restore for every key in the offsets topic (same fold as the worker)."""
    logs: dict[PartitionRef, list[OffsetState | None]] = {}

    def take(msg) -> None:  # type: ignore[no-untyped-def]
        raw = msg.value()
        with contextlib.suppress(OffsetRecordError):  # skipped, as a worker's restore skips it
            logs.setdefault(decode_key(msg.key()), []).append(None if raw is None else decode_value(raw))

    kafka.read_to_end({"bootstrap.servers": bootstrap}, offsets_topic, take)
    return {ref: fold(states) for ref, states in logs.items()}


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()
