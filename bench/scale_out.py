"""Scale-out on one machine: delivered records/s with 1, 2 and 4 worker processes.

Run: python3 bench/scale_out.py [--records 40000] [--partitions 24] [--workers 1,2,4]

The same records (100 B, 1,200 keys, ``--partitions`` partitions) go to the same trivial
endpoint; each run starts N static workers splitting the partitions round-robin (what the
coordinator's planner does for equal weights) and measures between 10 % and 90 % of the records
delivered, so start-up and the tail are left out. Per worker, CPU time comes from
/proc/<pid>/stat; "per core" divides the delivered rate by the CPU the workers used, and the
machine's total busy CPU (/proc/stat) shows when the 2 cores are saturated; the broker's and the
endpoint's cores are printed too (they, this script and anything else on the machine share them).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import Stack, cpu_seconds, machine_cpu_seconds, sub
from bench.delivery import produce


def run(s: Stack, topic: str, partitions: int, n_workers: int, records: int, window: int) -> dict[str, float]:
    name = f"scale{n_workers}"
    subs = [sub(name, [topic], s.ep, max_in_flight=window)]
    s.reset()
    workers = []
    for i in range(n_workers):
        parts = [{"subscription": name, "topic": topic, "partition": p} for p in range(i, partitions, n_workers)]
        workers.append(s.worker(f"{name}-{i}", subs, parts, env={"FERRY_OFFSETS_TOPIC": f"__bench_{name}"}, wait=False))
    marks: dict[str, tuple[float, float, list[float], float, float, float]] = {}
    broker_pid: int = s.broker.proc.pid  # type: ignore[union-attr]
    endpoint_pid: int = s.endpoint.proc.pid  # type: ignore[union-attr]
    deadline = time.monotonic() + 600
    while "end" not in marks:
        count = s.stats()["count"]
        for label, frac in (("start", 0.1), ("end", 0.9)):
            if label not in marks and count >= frac * records:
                pids = [w.proc.pid for w in workers]  # type: ignore[union-attr]
                marks[label] = (
                    time.monotonic(),
                    count,
                    [cpu_seconds(p) for p in pids],
                    machine_cpu_seconds(),
                    cpu_seconds(broker_pid),
                    cpu_seconds(endpoint_pid),
                )
        for w in workers:
            assert w.alive(), w.log_tail()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{n_workers} workers: {count:,} of {records:,} in 600 s")
        time.sleep(0.02)
    for w in workers:
        w.stop()
    (t0, c0, cpu0, m0, b0, e0), (t1, c1, cpu1, m1, b1, e1) = marks["start"], marks["end"]
    secs = t1 - t0
    worker_cpu = sum(cpu1) - sum(cpu0)
    return {
        "workers": n_workers,
        "rate": (c1 - c0) / secs,
        "worker_cores": worker_cpu / secs,
        "machine_cores": (m1 - m0) / secs,
        "broker_cores": (b1 - b0) / secs,
        "endpoint_cores": (e1 - e0) / secs,
        "per_cpu_s": (c1 - c0) / worker_cpu if worker_cpu else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=40_000)
    ap.add_argument("--partitions", type=int, default=24)
    ap.add_argument("--keys", type=int, default=1_200)
    ap.add_argument("--window", type=int, default=10, help="max_in_flight per partition")
    ap.add_argument("--workers", default="1,2,4")
    a = ap.parse_args()
    rows = []
    with Stack("ferry-bench-scale-") as s:
        print(f"producing {a.records:,} records ({a.keys} keys, {a.partitions} partitions, 100 B)...", flush=True)
        produce(s.bootstrap, "scale", a.partitions, a.records, a.keys, 100)
        for n in (int(x) for x in a.workers.split(",")):
            rows.append(run(s, "scale", a.partitions, n, a.records, a.window))
            r = rows[-1]
            print(f"  {n} worker(s): {r['rate']:,.0f} records/s, workers use {r['worker_cores']:.2f} cores", flush=True)
    base = rows[0]
    print()
    print(
        f"{'workers':>7} {'records/s':>9} {'vs 1':>5} {'per worker':>10} {'worker cores':>12} "
        f"{'rec/CPU-s':>9} {'per core vs 1':>13} {'broker':>6} {'endpoint':>8} {'machine busy':>12}"
    )
    for r in rows:
        print(
            f"{int(r['workers']):>7} {r['rate']:>9,.0f} {r['rate'] / base['rate']:>4.2f}x "
            f"{r['rate'] / r['workers'] / base['rate']:>9.2f}x {r['worker_cores']:>12.2f} "
            f"{r['per_cpu_s']:>9,.0f} {r['per_cpu_s'] / base['per_cpu_s']:>12.2f}x {r['broker_cores']:>6.2f} "
            f"{r['endpoint_cores']:>8.2f} {r['machine_cores']:>6.2f} cores"
        )
    print(
        f"{a.records:,} records, {a.partitions} partitions, max_in_flight {a.window}, "
        "measured from 10 % to 90 % delivered"
    )


if __name__ == "__main__":
    main()
