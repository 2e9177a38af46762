"""The portal's reads of the cluster's Kafka topics, against the real broker: the newest dead
letters of a topic, and offset states read incrementally (bad and stale records skipped)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from ferry import config, kafka
from ferry.offsets import OffsetState, encode_key, encode_value
from ferry.portal.cluster import Cluster
from ferry.subscription import PartitionRef
from tests.support.kafka import create_topic, produce

pytestmark = pytest.mark.integration


@pytest.fixture()
def cluster(kafka_bootstrap: str, zk_connect: str) -> Iterator[Cluster]:
    settings = config.load(
        env={
            "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_OFFSETS_TOPIC": f"__offsets-pc-{secrets.token_hex(3)}",
        }
    )
    yield Cluster(settings)


def test_last_records_are_the_newest_of_every_partition(kafka_bootstrap: str, cluster: Cluster) -> None:
    topic = f"dlq-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    now_ms = int(time.time() * 1000)
    for i in range(60):  # older records first, on every partition
        p.produce(topic, value=str(i).encode(), partition=i % 3, timestamp=now_ms - 60_000 + i)
    for i in range(4):
        p.produce(topic, value=f"new{i}".encode(), partition=i % 3, timestamp=now_ms + i)
    assert p.flush(30) == 0
    got = cluster.last_records(topic, 4)
    assert sorted(m.value() for m in got) == [b"new0", b"new1", b"new2", b"new3"]
    assert len(cluster.last_records(topic, 1000)) == 64
    assert cluster.last_records(f"missing-{secrets.token_hex(3)}", 5) == []


def test_offset_states_are_read_incrementally(kafka_bootstrap: str, cluster: Cluster) -> None:
    topic = cluster.settings.kafka.offsets_topic
    kafka.ensure_topic({"bootstrap.servers": kafka_bootstrap}, topic, 2, {"cleanup.policy": "compact"})
    a, b = PartitionRef("s", "t", 0), PartitionRef("s", "t", 1)

    def write(ref: PartitionRef, committed: int, epoch: int) -> None:
        value = encode_value(OffsetState(committed, (), epoch, "w", 1))
        produce(kafka_bootstrap, topic, [(encode_key(ref), value, 0)])

    write(a, 10, 2)
    produce(kafka_bootstrap, topic, [(encode_key(b), b"not json", 1)])
    assert cluster.offset_states([a, b]) == {a: OffsetState(10, (), 2, "w", 1), b: None}
    write(a, 5, 1)  # stale: a fenced-out owner
    write(b, 7, 1)
    assert cluster.offset_states([a, b]) == {a: OffsetState(10, (), 2, "w", 1), b: OffsetState(7, (), 1, "w", 1)}
