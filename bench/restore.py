"""Restore time of a handoff: the worker's incremental restore (reads only what was written since
its previous restore) vs reading the whole offsets topic each time (what every restore did before),
on an offsets topic holding a long history, in one run.

Run: python3 bench/restore.py [--history 300000] [--keys 3000] [--handoffs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer

from bench import _results
from ferry import kafka
from ferry.devstack import embedded
from ferry.offsets import OffsetState, encode_key, encode_value
from ferry.subscription import PartitionRef
from ferry.worker.offset_store import OffsetStore
from ferry.worker.producer import AsyncProducer


def write(p: Producer, topic: str, refs: list[PartitionRef], n: int, start: int) -> None:
    for i in range(n):
        ref = refs[(start + i) % len(refs)]
        value = encode_value(OffsetState(start + i, ((start + i + 2, start + i + 5),), 1, "w1", 1_763_800_000_000 + i))
        while True:
            try:
                p.produce(topic, key=encode_key(ref), value=value)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--history", type=int, default=300_000, help="offset records already in the topic")
    ap.add_argument("--keys", type=int, default=3_000)
    ap.add_argument("--handoffs", type=int, default=5)
    ap.add_argument("--between", type=int, default=2_000, help="offset records written between two handoffs")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-restore-"))
    broker = embedded.kafka_broker(tmp, embedded.free_port()).start().wait_ready(30)
    cfg = {"bootstrap.servers": f"127.0.0.1:{broker.port}"}
    topic = "__bench_offsets"
    try:
        kafka.ensure_topic(cfg, topic, 12, {"cleanup.policy": "compact"})
        refs = [PartitionRef("s", "t", k) for k in range(a.keys)]
        p = Producer({**cfg, "linger.ms": 50, "partitioner": "murmur2_random", "queue.buffering.max.messages": 500_000})
        print(f"writing {a.history:,} offset records over {a.keys:,} keys...", flush=True)
        write(p, topic, refs, a.history, 0)
        producer = AsyncProducer(cfg)
        incremental = OffsetStore(cfg, topic, producer)
        started = time.perf_counter()
        incremental.read_states(refs[:1])
        first_s = time.perf_counter() - started
        full_s: list[float] = []
        inc_s: list[float] = []
        written = a.history
        for h in range(a.handoffs):
            write(p, topic, refs, a.between, written)
            written += a.between
            ref = refs[h % len(refs)]
            started = time.perf_counter()
            mine = incremental.read_states([ref])[ref]
            inc_s.append(time.perf_counter() - started)
            fresh = OffsetStore(cfg, topic, producer)  # a store that has read nothing: the old behaviour
            started = time.perf_counter()
            theirs = fresh.read_states([ref])[ref]
            full_s.append(time.perf_counter() - started)
            fresh.close()
            assert mine == theirs, (mine, theirs)
        incremental.close()
        producer.close()
        full, inc = statistics.median(full_s), statistics.median(inc_s)
        print()
        print(f"offsets topic: {written:,} records, {a.keys:,} keys; {a.between:,} new records before each handoff")
        print(f"{'restore of one handoff':44} {'median s':>9} {'max s':>7}")
        print(f"{'whole topic each time (baseline)':44} {full:9.3f} {max(full_s):7.3f}")
        print(f"{'incremental (ferry)':44} {inc:9.3f} {max(inc_s):7.3f}")
        print(f"ratio: {full / inc:.1f}x faster; the worker's first restore read the whole topic in {first_s:.2f} s")
        _results.save(
            "restore",
            _results.command_line("python3 bench/restore.py", ap, a),
            ["restore at a handoff", "median s", "max s"],
            [
                ["read the whole offsets topic (baseline)", f"{full:.3f}", f"{max(full_s):.3f}"],
                ["incremental (Ferry)", f"{inc:.3f}", f"{max(inc_s):.3f}"],
            ],
            f"{a.history:,} offset records of {a.keys:,} keys",
        )
    finally:
        broker.stop()


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
