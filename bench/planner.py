"""Planner speed and movement: 100,000 partitions × 500 workers (goal: each plan < 1 s).

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

from ferry.coordinator.planner import moves, plan


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


if __name__ == "__main__":
    main()
