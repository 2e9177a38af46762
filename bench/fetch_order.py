"""The order in which a broker hands out a backlog's partitions to one consumer.

Run: python3 -m bench.fetch_order [--records 500000] [--partitions 12] [--work-us 4] [--kafka-config JSON]

A worker pushing with ``ordering=partition`` keeps at most one batch per partition in flight, so
it is only as busy as the number of partitions it has records of. This consumes the backlog
bench/batch.py makes (same records, keys and partitions) with the settings of the worker's fetch
thread (ferry/worker/fetch.py: consume up to ``CONSUME_MAX`` at a time, librdkafka's queue and
fetch sizes as the worker sets them), spending ``--work-us`` of CPU per record as the worker
would, and prints for every partition when its first and its last record arrived, and how many
partitions brought records in each quarter of a second. ``--kafka-config`` overrides librdkafka
settings (for example ``'{"fetch.message.max.bytes": 65536}'``). The broker is a fresh embedded
one.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, TopicPartition

from bench.batch import produce
from ferry.devstack import embedded
from ferry.worker.backpressure import CONSUME_MAX
from ferry.worker.fetch import fetch_config

SLICE_S = 0.25


def consume(bootstrap: str, topic: str, partitions: int, n: int, work_us: float, extra: dict[str, object]) -> None:
    consumer = Consumer(fetch_config({"bootstrap.servers": bootstrap, **extra}, "fetch-order"))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    first: list[float | None] = [None] * partitions
    last = [0.0] * partitions
    slices: list[set[int]] = []
    started: float | None = None
    got = 0
    deadline = time.monotonic() + 300
    try:
        while got < n and time.monotonic() < deadline:
            msgs = consumer.consume(CONSUME_MAX, 0.005)
            now = time.monotonic()
            for m in msgs:
                if m.error() is not None:
                    continue
                p = m.partition() or 0
                if started is None:
                    started = now
                at = now - started
                first[p] = at if first[p] is None else first[p]
                last[p] = at
                while len(slices) <= int(at / SLICE_S):
                    slices.append(set())
                slices[int(at / SLICE_S)].add(p)
                got += 1
            spin_until = time.perf_counter() + len(msgs) * work_us / 1e6
            while time.perf_counter() < spin_until:  # CPU spent as the worker would spend it
                pass
    finally:
        consumer.close()
    print(f"{got:,} records in {max(last):.2f} s with {json.dumps(extra) if extra else 'the worker settings'}")
    print("partition     " + " ".join(f"{p:>5}" for p in range(partitions)))
    print("first record  " + " ".join(f"{f or 0:5.2f}" for f in first))
    print("last record   " + " ".join(f"{t:5.2f}" for t in last))
    busy = [len(s) for s in slices]
    print(f"partitions bringing records per {SLICE_S:g} s: {' '.join(map(str, busy))}")
    fewer = sum(1 for b in busy if b < partitions / 2) * SLICE_S
    print(f"time with records of fewer than half the partitions: {fewer:.2f} s of {len(busy) * SLICE_S:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--work-us", type=float, default=4.0, help="CPU spent per record consumed")
    ap.add_argument("--kafka-config", default="{}", help="librdkafka settings over the worker's (JSON)")
    a = ap.parse_args()
    embedded.tie_children()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-fetch-order-"))
    broker = embedded.kafka_broker(work, embedded.free_port()).start().wait_ready(30)
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        print(f"producing {a.records:,} records ({a.keys} keys, {a.partitions} partitions, 100 B JSON)...")
        produce(bootstrap, "backlog", a.partitions, a.records, a.keys)
        consume(bootstrap, "backlog", a.partitions, a.records, a.work_us, json.loads(a.kafka_config))
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
