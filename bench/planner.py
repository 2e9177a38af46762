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
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _results
from ferry.coordinator.planner import moves, plan, plan_zones

T = TypeVar("T")
RETURN = "zones: dc2's workers return"


def timed(label: str, fn: Callable[[], T], rows: list[tuple[str, float]]) -> T:
    t0 = time.perf_counter()
    out = fn()
    rows.append((label, time.perf_counter() - t0))
    return out


def per_worker(c: Counter[str]) -> str:
    lo, hi = min(c.values()), max(c.values())
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


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
    joined_moved, left_moved, unchanged_moved = (
        len(moves(first, second)),
        len(moves(second, third)),
        len(moves(third, same)),
    )
    leaver_held = Counter(second.values())["worker-7"]
    print(f"fresh: partitions per worker {min(c.values())}..{max(c.values())}")
    print(f"join moved {joined_moved} (ideal ~{a.partitions // (a.workers + 1)})")
    print(f"leave moved {left_moved} (the leaver held {leaver_held})")
    print(f"no change moved {unchanged_moved}")
    zone_rows = zones(a.partitions, a.workers)
    secs = dict(rows)
    _results.save(
        "planner",
        _results.command_line("python3 bench/planner.py", ap, a),
        [f"{a.partitions:,} partitions × {a.workers:,} workers", "seconds", "partitions moved"],
        [
            ["fresh plan", f"{secs['fresh plan']:.3f}", f"— ({per_worker(c)} per worker)"],
            [
                "one worker joins",
                f"{secs['one worker joins']:.3f}",
                f"{joined_moved:,} (ideal ~{a.partitions // (a.workers + 1):,})",
            ],
            [
                "one worker leaves",
                f"{secs['one worker leaves']:.3f}",
                f"{left_moved:,} (the leaver's)"
                if left_moved == leaver_held
                else f"{left_moved:,} (the leaver held {leaver_held:,})",
            ],
            ["nothing changes", f"{secs['nothing changes']:.3f}", f"{unchanged_moved:,}"],
            *zone_rows,
        ],
    )


def zones(n_parts: int, n_workers: int) -> list[list[str]]:
    """Two zones: each cluster's partitions on its zone's workers; dc2's workers all gone; back.

    Returns the result table's rows of the three moves."""
    parts = {("sub", f"topic{i % 1000}", i // 1000, "default" if i % 2 else "dc2"): 1.0 for i in range(n_parts)}
    home = {p: ("dc1" if p[3] == "default" else "dc2") for p in parts}
    workers = {f"worker-{i}": ("dc1" if i % 2 else "dc2", 1.0) for i in range(n_workers)}
    dc1_only = {w: z for w, z in workers.items() if z[0] == "dc1"}
    rows: list[tuple[str, float]] = []
    first = timed("zones: fresh plan", lambda: plan_zones(workers, parts, home, {}), rows)
    failed = timed("zones: every dc2 worker gone", lambda: plan_zones(dc1_only, parts, home, first), rows)
    back = timed(RETURN, lambda: plan_zones(workers, parts, home, failed), rows)
    same = timed("zones: nothing changes", lambda: plan_zones(workers, parts, home, back), rows)
    for label, sec in rows:
        print(f"{label:32} {sec:8.3f}")
    wrong = sum(1 for p, w in first.items() if workers[w][0] != home[p])
    failover, failback = len(moves(first, failed)), len(moves(failed, back))
    c = Counter(first.values())
    print(f"zones fresh: {wrong} partitions outside their zone, per worker {min(c.values())}..{max(c.values())}")
    c = Counter(failed.values())
    print(f"zones failover: moved {failover}, per dc1 worker {min(c.values())}..{max(c.values())}")
    print(f"zones failback: moved {failback}; no change moved {len(moves(back, same))}")
    secs = dict(rows)
    zone_held = sum(1 for w in first.values() if workers[w][0] == "dc2")
    away = sum(1 for p, w in back.items() if workers[w][0] != home[p])
    return [
        [
            "two zones: fresh plan",
            f"{secs['zones: fresh plan']:.3f}",
            "— (none outside its zone)" if wrong == 0 else f"— ({wrong:,} outside their zone)",
        ],
        [
            "two zones: every worker of one zone gone",
            f"{secs['zones: every dc2 worker gone']:.3f}",
            f"{failover:,} (that zone's)" if failover == zone_held else f"{failover:,} (that zone held {zone_held:,})",
        ],
        [
            "two zones: they return",
            f"{secs[RETURN]:.3f}",
            f"{failback:,} (back home)" if away == 0 else f"{failback:,} ({away:,} still outside their zone)",
        ],
    ]


if __name__ == "__main__":
    main()
