"""Planner speed and movement: 100,000 partitions × 500 workers (goal: each plan < 1 s),
without zones and with two zones (half the partitions and workers in each).

Run: python3 bench/planner.py [--partitions 100000] [--workers 500]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ferry.coordinator.planner import moves, plan, plan_zones


def timed(label: str, fn, rows: list) -> dict:  # type: ignore[no-untyped-def,type-arg]
    t0 = time.perf_counter()
    out = fn()
    rows.append((label, time.perf_counter() - t0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=500)
    a = ap.parse_args()
    parts = {("sub", f"topic{i % 1000}", i // 1000): 1.0 for i in range(a.partitions)}
    workers = {f"worker-{i}": 1.0 for i in range(a.workers)}
    rows: list[tuple[str, float]] = []
    first = timed("fresh plan", lambda: plan(workers, parts, {}), rows)
    joined = dict(workers, **{"worker-new": 1.0})
    second = timed("one worker joins", lambda: plan(joined, parts, first), rows)
    left = {w: c for w, c in joined.items() if w != "worker-7"}
    third = timed("one worker leaves", lambda: plan(left, parts, second), rows)
    same = timed("nothing changes", lambda: plan(left, parts, third), rows)
    rng = random.Random(1)
    weighted = {p: rng.uniform(0.1, 10) for p in parts}
    timed("weighted partitions, fresh", lambda: plan(workers, weighted, {}), rows)
    print(f"planner: {a.partitions:,} partitions x {a.workers} workers")
    print(f"{'case':32} {'seconds':>8}")
    for label, s in rows:
        print(f"{label:32} {s:8.3f}")
    c = Counter(first.values())
    print(f"fresh: partitions per worker {min(c.values())}..{max(c.values())}")
    print(f"join moved {len(moves(first, second))} (ideal ~{a.partitions // (a.workers + 1)})")
    print(f"leave moved {len(moves(second, third))} (the leaver held {Counter(second.values())['worker-7']})")
    print(f"no change moved {len(moves(third, same))}")
    zones(a.partitions, a.workers)


def zones(n_parts: int, n_workers: int) -> None:
    """Two zones: each cluster's partitions on its zone's workers; dc2's workers all gone; back."""
    parts = {("sub", f"topic{i % 1000}", i // 1000, "default" if i % 2 else "dc2"): 1.0 for i in range(n_parts)}
    home = {p: ("dc1" if p[3] == "default" else "dc2") for p in parts}
    workers = {f"worker-{i}": ("dc1" if i % 2 else "dc2", 1.0) for i in range(n_workers)}
    dc1_only = {w: z for w, z in workers.items() if z[0] == "dc1"}
    rows: list[tuple[str, float]] = []
    first = timed("zones: fresh plan", lambda: plan_zones(workers, parts, home, {}), rows)
    failed = timed("zones: every dc2 worker gone", lambda: plan_zones(dc1_only, parts, home, first), rows)
    back = timed("zones: dc2's workers return", lambda: plan_zones(workers, parts, home, failed), rows)
    same = timed("zones: nothing changes", lambda: plan_zones(workers, parts, home, back), rows)
    for label, sec in rows:
        print(f"{label:32} {sec:8.3f}")
    wrong = sum(1 for p, w in first.items() if workers[w][0] != home[p])
    c = Counter(first.values())
    print(f"zones fresh: {wrong} partitions outside their zone, per worker {min(c.values())}..{max(c.values())}")
    c = Counter(failed.values())
    print(f"zones failover: moved {len(moves(first, failed))}, per dc1 worker {min(c.values())}..{max(c.values())}")
    print(f"zones failback: moved {len(moves(failed, back))}; no change moved {len(moves(back, same))}")


if __name__ == "__main__":
    main()
