"""ferry.kafka.read_partitions_to_end against the real broker: the one way the worker, the portal and
the shared helpers find where a partition ends (reading to EOF from a start or a hint)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from ferry import kafka
from tests.support.kafka import create_topic, produce

pytestmark = pytest.mark.integration


@pytest.fixture()
def reader(kafka_bootstrap: str) -> Iterator[Consumer]:
    c = kafka.reader({"bootstrap.servers": kafka_bootstrap})
    try:
        yield c
    finally:
        c.close()


@pytest.fixture()
def topic(kafka_bootstrap: str) -> str:
    """Two partitions: 15 records on partition 0, 5 on partition 1."""
    name = f"read-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, name, 2)
    produce(kafka_bootstrap, name, ((None, f"v{i}".encode(), 0 if i < 15 else 1) for i in range(20)))
    return name


def test_reads_every_record_from_the_starts(reader: Consumer, topic: str) -> None:
    seen: list[tuple[int, int]] = []

    def take(m: Message) -> None:
        seen.append((m.partition() or 0, m.offset() or 0))

    ends = kafka.read_partitions_to_end(reader, {(topic, 0): 10, (topic, 1): OFFSET_BEGINNING}, take)
    assert ends == {(topic, 0): 15, (topic, 1): 5}
    assert sorted(seen) == [(0, o) for o in range(10, 15)] + [(1, o) for o in range(5)]
    assert reader.assignment() == []  # left unassigned, ready for the next read


def test_a_hint_past_the_end_is_rewound(reader: Consumer, topic: str) -> None:
    started = time.monotonic()
    ends = kafka.read_partitions_to_end(reader, {(topic, 0): 500, (topic, 1): 3}, rewind_after_s=1.0, timeout_s=20)
    assert ends == {(topic, 0): 15, (topic, 1): 5}
    assert time.monotonic() - started < 15


def test_a_start_past_the_end_is_not_rewound_without_a_hint_timeout(reader: Consumer, topic: str) -> None:
    with pytest.raises(kafka.KafkaUnavailable):
        kafka.read_partitions_to_end(reader, {(topic, 0): 500}, timeout_s=2)


def test_until_and_stop_at_end_a_partition_early(reader: Consumer, topic: str) -> None:
    seen: list[int] = []
    ends = kafka.read_partitions_to_end(
        reader,
        {(topic, 0): OFFSET_BEGINNING, (topic, 1): OFFSET_BEGINNING},
        lambda m: seen.append(m.offset() or 0),
        until=lambda m: m.value() == b"v12",
        stop_at={(topic, 1): 2},
    )
    assert ends == {(topic, 0): 12, (topic, 1): 2}
    assert sorted(seen) == [0, 0, 1, 1, *range(2, 12)]


def test_read_to_end_by_topic(kafka_bootstrap: str, topic: str) -> None:
    values: list[bytes] = []
    ends = kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, topic, lambda m: values.append(m.value() or b""))
    assert ends == {0: 15, 1: 5}
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))
    assert kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, f"missing-{secrets.token_hex(3)}", print) == {}


def test_portal_ends_and_starts(kafka_bootstrap: str, topic: str) -> None:
    from ferry import config
    from ferry.portal.cluster import Cluster

    cluster = Cluster(config.load(env={"FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap}))
    assert cluster.end_offset(topic, 0) == 15
    assert cluster.end_offset(topic, 0, hint=4) == 15
    assert cluster.end_offset(topic, 0, hint=500) == 15  # past the end: rewound
    assert cluster.start_offset(topic, 0) == 0
    assert cluster.scan(topic, 1, 0) == 5
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    now_ms = int(time.time() * 1000)
    p.produce(topic, value=b"later", partition=1, timestamp=now_ms + 60_000)
    assert p.flush(15) == 0
    assert cluster.scan(topic, 1, 0, until_ts_ms=now_ms + 30_000) == 5  # the first record at or after it
    assert cluster.scan(topic, 1, 0, until_ts_ms=now_ms + 120_000) == 6  # none: the end


def test_consume_ready_takes_what_came_without_waiting_out_its_timeout(reader: Consumer, topic: str) -> None:
    """``consume(n, timeout)`` waits its whole timeout unless ``n`` messages come; a reader waiting
    for one entry must not (the live views of the gateway read their own writes back this way)."""
    reader.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    values: list[bytes] = []
    started = time.monotonic()
    deadline = started + 30
    while len(values) < 20 and time.monotonic() < deadline:
        values += [m.value() for m in kafka.consume_ready(reader, 1000, 20.0) if m.error() is None]
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(20))
    assert time.monotonic() - started < 10  # far below one 20 s timeout: no call waited its timeout out
    empty_started = time.monotonic()
    while (m := kafka.consume_ready(reader, 1000, 0.2)) and time.monotonic() - empty_started < 5:
        assert all(x.error() is not None for x in m)  # only end-of-partition events are left
    assert kafka.consume_ready(reader, 1000, 0.2) == []
