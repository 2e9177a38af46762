"""Batch mode's per-record steps without I/O: µs per record of the window (add, take), the encoder
and the acknowledgements (merge + finish), per ordering, on the path the worker runs (C encoder
unless FERRY_NATIVE=0).

Run: python3 bench/pipeline.py [--records 200000] [--keys 17] [--repeat 3]

One partition: records arrive in fetch-sized chunks of 42 (500 per consume() over 12 partitions),
at most 2,000 wait in the window, batches of up to 100 are taken as bench/batch.py's worker takes
them (``max_in_flight`` 1000), and the oldest of up to 8 batches "in flight" is acknowledged
whole. ``--keys`` 17 is bench/batch.py's 200 keys over 12 partitions. Min of the repeats. What is
left of the worker's CPU per record in bench/batch.py is the HTTP exchange and asyncio per POST.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from operator import attrgetter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.batch import JSON_HEADERS, VALUE
from ferry.worker.batch import EventEncoder, encode_batch, event_size
from ferry.worker.offset_merge import OffsetMerge
from ferry.worker.push import Record
from ferry.worker.window import Window

STEPS = ("add", "take", "encode", "ack")
_raw_size = attrgetter("size")
_offset = attrgetter("offset")


def run(ordering: str, n: int, keys: int) -> tuple[dict[str, float], float]:
    """µs per record of each step, and records per batch."""
    headers = tuple(JSON_HEADERS)
    records = [Record("t", 0, i, b"k%d" % (i % keys), VALUE, headers, 1763800000000 + i) for i in range(n)]
    window: Window[Record] = Window(ordering, 1000)
    merge = OffsetMerge(0)
    encoder = EventEncoder("bench", "pipeline")
    spent = dict.fromkeys(STEPS, 0.0)
    in_flight: deque[list[Record]] = deque()
    i = batches = 0
    clock = time.perf_counter
    while i < n or in_flight or window.pending:
        if i < n and window.pending < 2000:
            t = clock()
            window.add_many(records[i : i + 42])
            spent["add"] += clock() - t
            i += 42
        t = clock()
        batch = window.take_batch(100, 1 << 20, event_size, _raw_size)
        spent["take"] += clock() - t
        if batch:
            t = clock()
            encode_batch(encoder, batch, [1] * len(batch))
            spent["encode"] += clock() - t
            in_flight.append(batch)
            batches += 1
        if len(in_flight) > 8 or (not batch and in_flight):
            done = in_flight.popleft()
            t = clock()
            offsets = list(map(_offset, done))
            merge.ack_many(offsets)
            window.finish_offsets(offsets)
            spent["ack"] += clock() - t
    return {k: v / n * 1e6 for k, v in spent.items()}, n / max(1, batches)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=17)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"{'ordering':<10} " + " ".join(f"{s:>7}" for s in STEPS) + f" {'total':>7}  records/batch  (µs per record)")
    for ordering in ("key", "partition", "none"):
        best: dict[str, float] = {}
        per_batch = 0.0
        for _ in range(a.repeat):
            spent, per_batch = run(ordering, a.records, a.keys)
            best = {k: min(best.get(k, v), v) for k, v in spent.items()}
        total = sum(best.values())
        print(f"{ordering:<10} " + " ".join(f"{best[s]:7.2f}" for s in STEPS) + f" {total:7.2f}  {per_batch:13.1f}")


if __name__ == "__main__":
    main()
