"""The fetch thread's CPU per record, by how many records it takes from librdkafka at once.

Run: python3 -m bench.consume_cost [--records 300000] [--rounds 3] [--sizes 100,250,500,1000,2000]

The worker's fetch thread (ferry/worker/fetch.py) calls ``consume(n)`` and turns the messages
into records (``build_batch``, the C twin), holding the GIL throughout; the event loop pushing
the records waits meanwhile. This consumes the backlog bench/batch.py makes (same records, keys
and partitions; a fresh embedded broker) with the fetch thread's librdkafka settings, once per
batch size and round, interleaved, keeping the last 20,000 records alive as the windows would,
and prints the thread's CPU per record for ``consume()`` and for building, each size's median
over the rounds. The worker's own size is ``CONSUME_MAX`` (ferry/worker/backpressure.py).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, TopicPartition

from bench.batch import produce
from ferry.devstack import embedded
from ferry.worker.backpressure import CONSUME_MAX
from ferry.worker.fetch import Headers, build_batch, fetch_config

KEEP_RECORDS = 20_000
"""Records kept alive after building, as a worker's windows hold them until they are pushed."""


def drain(bootstrap: str, topic: str, partitions: int, n: int, size: int, group: str) -> tuple[float, float]:
    """Consume ``n`` records ``size`` at a time: (consume, build) CPU µs per record of this thread."""
    consumer = Consumer(fetch_config({"bootstrap.servers": bootstrap}, group))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    header_sets: dict[Headers, Headers] = {}
    kept: deque[object] = deque(maxlen=max(1, KEEP_RECORDS // size))
    consume_s = build_s = 0.0
    got = 0
    deadline = time.monotonic() + 300
    try:
        while got < n and time.monotonic() < deadline:
            t0 = time.thread_time()
            msgs = consumer.consume(size, 0.5)
            t1 = time.thread_time()
            if not msgs:
                continue
            built = build_batch(msgs, header_sets)
            t2 = time.thread_time()
            consume_s += t1 - t0
            build_s += t2 - t1
            got += sum(len(v) for v in built[0].values())
            kept.append(built)
    finally:
        consumer.close()
    if got < n:
        raise TimeoutError(f"consumed {got:,} of {n:,} records in 300 s")
    return consume_s / n * 1e6, build_s / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="100,250,500,1000,2000", help="records per consume, comma-separated")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    gc.freeze()
    gc.set_threshold(100_000, 10, 10)  # as the worker (ferry/worker/service.py)
    embedded.tie_children()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-consume-cost-"))
    broker = embedded.kafka_broker(work, embedded.free_port()).start().wait_ready(30)
    runs: dict[int, list[tuple[float, float]]] = {s: [] for s in sizes}
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        produce(bootstrap, "backlog", a.partitions, a.records, a.keys)
        for r in range(a.rounds):
            for s in sizes:
                runs[s].append(drain(bootstrap, "backlog", a.partitions, a.records, s, f"cost-{r}-{s}"))
    finally:
        broker.stop()
    print(f"{a.records:,} records, {a.partitions} partitions, {a.rounds} rounds; the worker takes {CONSUME_MAX}")
    print(f"{'records per consume':>20} {'consume µs/record':>18} {'build µs/record':>16} {'total':>7}  every round")
    for s, v in runs.items():
        c, b = statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)
        every = ", ".join(f"{x[0] + x[1]:.2f}" for x in v)
        print(f"{s:>20} {c:18.2f} {b:16.2f} {c + b:7.2f}  {every}")


if __name__ == "__main__":
    main()
