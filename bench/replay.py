"""Offset records replayed per minute: Spark (local[2], the replay's Data Source, decoder and fold)
vs a plain single-process confluent-kafka reader computing the same final state, in one run.

Run: python3 bench/replay.py [--records 1000000] [--keys 2000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import _results
from ferry import kafka
from ferry.devstack import embedded
from ferry.offsets import OffsetState, decode_key, decode_value, encode_value, fold


def produce(bootstrap: str, topic: str, n: int, keys: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 12, 1, config={"cleanup.policy": "compact"})])[topic].result(15)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 500000,
        }
    )
    rng = random.Random(1)
    committed = [0] * keys
    epoch = [1] * keys
    for i in range(n):
        k = i % keys
        committed[k] += rng.randrange(1, 50)
        if rng.random() < 0.001:
            epoch[k] += 1
        acked = ((committed[k] + 2, committed[k] + 5),) if rng.random() < 0.3 else ()
        value = encode_value(OffsetState(committed[k], acked, epoch[k], f"w{epoch[k] % 4}", 1_763_800_000_000 + i))
        while True:
            try:
                p.produce(topic, key=f"sub-{k % 20}/topic-{k % 7}/{k}".encode(), value=value)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def plain(bootstrap: str, topic: str) -> dict:  # type: ignore[type-arg]
    logs: dict = {}  # type: ignore[type-arg]

    def take(m) -> None:  # type: ignore[no-untyped-def]
        raw = m.value()
        logs.setdefault(decode_key(m.key()), []).append(None if raw is None else decode_value(raw))

    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, take, timeout_s=600)
    return {k: fold(v) for k, v in logs.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=2000)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-replay-"))
    broker = embedded.kafka_broker(tmp, embedded.free_port()).start().wait_ready(30)
    bootstrap = f"127.0.0.1:{broker.port}"
    try:
        t = time.monotonic()
        produce(bootstrap, "__bench_offsets", a.records, a.keys)
        print(f"produced {a.records:,} offset records over {a.keys} keys in {time.monotonic() - t:.1f} s", flush=True)

        t = time.monotonic()
        baseline = plain(bootstrap, "__bench_offsets")
        plain_s = time.monotonic() - t

        os.environ["FERRY_SPARK_MASTER"] = "local[2]"
        from pyspark.sql import functions as F

        from ferry import config
        from ferry.replay import analysis
        from ferry.replay.job import session
        from ferry.replay.source import KafkaSource

        spark = session("ferry-bench-replay")
        spark.dataSource.register(KafkaSource)
        t = time.monotonic()
        raw = spark.read.format("ferry-kafka").option("bootstrap", bootstrap).option("topic", "__bench_offsets").load()
        # one cluster's offsets topic, marked as the replay job marks each cluster's rows
        final = analysis.final_state(analysis.decode(raw).withColumn("cluster", F.lit("default"))).collect()
        spark_s = time.monotonic() - t
        spark.stop()
        got = {(r.subscription, r.topic, r.partition): (r.committed, r.epoch) for r in final}
        want = {
            (k.subscription, k.topic, k.partition): (v.committed, v.epoch) for k, v in baseline.items() if v is not None
        }
        assert got == want, "Spark's final state differs from the plain reader's"
        _ = config
        print(f"{'':34} {'seconds':>8} {'records/min':>14}")
        print(f"{'plain confluent-kafka reader':34} {plain_s:8.1f} {a.records / plain_s * 60:14,.0f}")
        print(f"{'spark local[2] (final state)':34} {spark_s:8.1f} {a.records / spark_s * 60:14,.0f}")
        print(f"final states equal for all {len(got)} keys; spark/plain speed: {plain_s / spark_s:.2f}x")
        _results.save(
            "replay",
            _results.command_line("python3 bench/replay.py", ap, a),
            [f"{a.records:,} offset records", "seconds", "records/min"],
            [
                ["plain confluent-kafka reader", f"{plain_s:.1f}", f"{a.records / plain_s * 60:,.0f}"],
                ["Spark local[2] (the replay job)", f"{spark_s:.1f}", f"{a.records / spark_s * 60:,.0f}"],
            ],
        )
    finally:
        broker.stop()


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
