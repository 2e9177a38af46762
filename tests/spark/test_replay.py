"""Spark offset replay on an offsets topic written with known truth, and end to end after a real delivery."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer

from ferry import config
from ferry.devstack import embedded
from ferry.offsets import OffsetState, encode_value
from ferry.subscription import PartitionRef
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.worker import static_worker

pytestmark = [pytest.mark.integration, pytest.mark.spark]
T0 = 1_763_800_000_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from ferry.replay.job import session

    s = session("ferry-replay-tests")
    yield s
    s.stop()


def write(bootstrap: str, topic: str, records: list[tuple[str, bytes | None]]) -> None:
    create_topic(bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "partitioner": "murmur2_random"})
    for key, value in records:
        p.produce(topic, key=key.encode(), value=value)
    assert p.flush(15) == 0


def st(committed: int, acked: list[tuple[int, int]], epoch: int, worker: str, dt_s: int) -> bytes:
    return encode_value(OffsetState(committed, tuple(acked), epoch, worker, T0 + dt_s * 1000))


def test_figures_match_the_known_truth(spark: Any, tmp_path: Path, kafka_bootstrap: str) -> None:
    from ferry.replay.job import run

    topic = f"__offsets-replay-{secrets.token_hex(3)}"
    a, b, c = "s1/orders/0", "s1/orders/1", "s2/other/0"
    write(
        kafka_bootstrap,
        topic,
        [
            (a, st(0, [(2, 4)], 1, "w1", 0)),
            (a, st(1, [(2, 4)], 1, "w1", 10)),  # out-of-order acks: 2 ranges above... one gap
            (a, st(3, [(5, 8), (9, 10)], 1, "w1", 70)),  # 4 acked above the watermark at the handoff
            (a, st(3, [(5, 8), (9, 10)], 2, "w2", 75)),  # handoff to w2 (epoch 2)
            (a, st(4, [], 1, "w1", 76)),  # stale: fenced-out w1 writes late
            (a, st(10, [], 2, "w2", 130)),
            (b, st(0, [], 1, "w1", 0)),
            (b, st(7, [], 1, "w1", 65)),
            (c, st(5, [], 1, "w9", 0)),
            (c, None),  # tombstone: no state any more
            (c, b"{not json"),  # invalid record: counted, never fatal
        ],
    )
    settings = config.load(env={"FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap, "FERRY_OFFSETS_TOPIC": topic})
    out = tmp_path / "out"
    summary = run(spark, settings, str(out))
    assert summary["invalid_records"] == 1
    assert summary["stale_writes"] == 1
    assert summary["handoffs"] == 1
    s1 = summary["subscriptions"]["s1"]
    assert (s1["records"], s1["handoffs"], s1["redeliveries_avoided"], s1["stale_writes"]) == (8, 1, 4, 1)
    assert s1["final_committed_total"] == 17

    final = pd.read_parquet(out / "final_state").sort_values(["subscription", "topic", "partition"])
    got = {(r.subscription, r.topic, r.partition): (r.committed, r.epoch, r.worker) for r in final.itertuples()}
    assert got == {("s1", "orders", 0): (10, 2, "w2"), ("s1", "orders", 1): (7, 1, "w1")}
    # The same answer a worker's restore gives (shared decoder and fold).
    restored = offset_states(kafka_bootstrap, topic)
    assert {k: (v.committed, v.epoch, v.worker) for k, v in restored.items() if v is not None} == {
        PartitionRef(*k): v for k, v in got.items()
    }
    from ferry.worker.offset_store import OffsetStore
    from ferry.worker.producer import AsyncProducer

    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap})
    store = OffsetStore({"bootstrap.servers": kafka_bootstrap}, topic, producer)
    try:
        worker_view = store.read_states([PartitionRef(*k) for k in got] + [PartitionRef("s2", "other", 0)])
    finally:
        # Left open, the producer's poll thread outlives the session's broker and logs its
        # connection failures after the test summary.
        store.close()
        producer.close()
    assert {k: (v.committed, v.epoch, v.worker) for k, v in worker_view.items() if v is not None} == {
        PartitionRef(*k): v for k, v in got.items()
    }
    assert worker_view[PartitionRef("s2", "other", 0)] is None

    ho = pd.read_parquet(out / "handoffs")
    assert len(ho) == 1
    h = ho.iloc[0]
    assert (h.previous_worker, h.worker, h.previous_epoch, h.epoch, h.uncommitted_acked) == ("w1", "w2", 1, 2, 4)
    tl = pd.read_parquet(out / "timeline")
    assert int(tl["stale"].sum()) == 1 and len(tl) == 9
    assert tl[(tl.partition == 0) & (tl.subscription == "s1")]["gaps"].tolist() == [1, 1, 2, 2, 0, 0]
    pm = pd.read_parquet(out / "per_minute")
    assert int(pm[pm.subscription == "s1"]["offset_writes"].sum()) == 7  # stale write excluded
    html = (out / "report.html").read_text()
    assert "<img" in html and "Stale-epoch writes" in html
    assert json.loads((out / "summary.json").read_text())["handoffs"] == 1

    since = run(spark, settings, str(tmp_path / "since"), subscription="s1", since_ms=T0 + 60_000)
    assert since["records"] == 5 and set(since["subscriptions"]) == {"s1"}


def test_replay_after_a_real_delivery(tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder) -> None:
    topic = f"rp-{secrets.token_hex(3)}"
    offsets_topic = f"__offsets-rp-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 3)
    produce(kafka_bootstrap, topic, ((f"k{i % 30}".encode(), b"v", i % 3) for i in range(2000)))
    sub = {"name": "rp", "topics": [topic], "endpoint": {"url": endpoint.url}, "ordering": "none"}
    w = static_worker(tmp_path, "wrp", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w.wait_ready(30)
        endpoint.wait_for(lambda rs: len({r.ce_id for r in rs}) >= 2000, timeout_s=60, what="2000 records")
    finally:
        w.stop()
    out = tmp_path / "replay"
    env = {
        "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "FERRY_OFFSETS_TOPIC": offsets_topic,
        "FERRY_SPARK_MASTER": "local[2]",
    }
    import os

    done = subprocess.run(
        [sys.executable, "-m", "ferry.cli", "replay", "--out", str(out)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    final = pd.read_parquet(out / "final_state")
    got = {PartitionRef(r.subscription, r.topic, int(r.partition)): (r.committed, r.epoch) for r in final.itertuples()}
    committed = offset_states(kafka_bootstrap, offsets_topic)
    assert got == {k: (v.committed, v.epoch) for k, v in committed.items() if v is not None}
    assert sorted(c for c, _ in got.values()) == sorted([667, 667, 666])


def test_every_clusters_offsets_topic_is_read(
    spark: Any, tmp_path: Path, kafka_bootstrap: str, own_broker: embedded.ServiceProcess
) -> None:
    """With several Kafka clusters (docs/zones.md), each keeps its partitions' states in its own
    offsets topic under the same keys: the replay reads them all and keeps them apart."""
    from ferry.replay.job import run

    topic = f"__offsets-zones-{secrets.token_hex(3)}"
    dc2 = f"127.0.0.1:{own_broker.port}"
    write(kafka_bootstrap, topic, [("s1/orders/0", st(5, [], 1, "a1", 0))])
    write(dc2, topic, [("s1/orders/0", st(3, [], 1, "b1", 0)), ("s1/orders/0", st(9, [], 2, "a1", 5))])
    settings = config.load(
        env={
            "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "FERRY_OFFSETS_TOPIC": topic,
            "FERRY_KAFKA_CLUSTERS": json.dumps({"dc2": {"bootstrap": dc2, "zone": "dc2"}}),
        }
    )
    summary = run(spark, settings, str(tmp_path / "out"))
    assert summary["clusters"] == ["default", "dc2"] and summary["records"] == 3
    assert summary["subscriptions"]["s1"]["partitions"] == 2 and summary["handoffs"] == 1
    final = pd.read_parquet(tmp_path / "out" / "final_state")
    got = {(r.cluster, r.partition): (r.committed, r.epoch, r.worker) for r in final.itertuples()}
    assert got == {("default", 0): (5, 1, "a1"), ("dc2", 0): (9, 2, "a1")}
