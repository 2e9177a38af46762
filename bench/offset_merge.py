"""Offset merge microbenchmark: acks/s for in-order and out-of-order acknowledgement patterns
(goal: >= 2 M acks/s), and the state size, which follows the number of gaps, not the window.

Run: python3 bench/offset_merge.py [--acks 2000000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ferry.offsets import OffsetState, encode_value
from ferry.worker.offset_merge import OffsetMerge


def shuffled_windows(n: int, window: int, rng: random.Random) -> list[int]:
    out: list[int] = []
    for base in range(0, n, window):
        chunk = list(range(base, min(n, base + window)))
        rng.shuffle(chunk)
        out += chunk
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--acks", type=int, default=2_000_000)
    a = ap.parse_args()
    rng = random.Random(1)
    patterns = {
        "in order": list(range(a.acks)),
        "shuffled within windows of 100": shuffled_windows(a.acks, 100, rng),
        "shuffled within windows of 1,000": shuffled_windows(a.acks, 1000, rng),
    }
    print(f"{'pattern':36} {'acks/s':>12} {'max gaps':>9}")
    for label, acks in patterns.items():
        m = OffsetMerge(0)
        max_gaps = 0
        started = time.perf_counter()
        for i, o in enumerate(acks):
            m.ack(o)
            if i % 1024 == 0:
                max_gaps = max(max_gaps, m.gaps)
        secs = time.perf_counter() - started
        assert m.committed == a.acks
        print(f"{label:36} {a.acks / secs:12,.0f} {max_gaps:9}")
    m = OffsetMerge(0)
    for o in range(1, 100_001):
        m.ack(o)  # offset 0 never acknowledged: one gap in front of 100,000 acks
    one_gap = len(encode_value(OffsetState(m.committed, m.acked, 1, "w", 0)))
    m2 = OffsetMerge(0)
    for o in range(1, 200_001, 2):
        m2.ack(o)  # every other offset: 100,000 gaps
    many = len(encode_value(OffsetState(m2.committed, m2.acked, 1, "w", 0)))
    print(f"state record: {one_gap} bytes for 1 gap over 100,000 acked offsets; {many:,} bytes for 100,000 gaps")


if __name__ == "__main__":
    main()
