"""Batch body encoding: µs per record of ``encode_batch``, the Python loop vs its C twin (worker/_encode.c).

Run: python3 bench/encode.py [--batches 1000] [--repeat 20]

100-record batches of bench/batch.py's records (100 B JSON values with ``content-type:
application/json``, so each value is checked and travels as ``data``; 200 keys; one partition per
batch, timestamps 1 ms apart), encoded by one encoder per path; min of the repeats. A second row
sends the same values as ``data_base64`` (no content type). No I/O: this is the encoding share of
the worker's per-record cost, not throughput (bench/batch.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.batch import JSON_HEADERS, VALUE
from ferry.worker import batch
from ferry.worker.batch import EventEncoder, encode_batch
from ferry.worker.push import Record


def batches(n: int, headers: Sequence[tuple[str, bytes | None]]) -> list[list[Record]]:
    shared = tuple(headers)  # as worker/fetch.py does: one tuple per distinct header set
    return [
        [
            Record(
                "bench",
                b % 12,
                b * 100 + i,
                f"k{(b * 100 + i) % 200}".encode(),
                VALUE,
                shared,
                1763800000000 + b * 100 + i,
            )
            for i in range(100)
        ]
        for b in range(n)
    ]


def per_record_us(work: list[list[Record]], repeat: int) -> float:
    encoder = EventEncoder("default", "bench")
    attempts = [1] * 100
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for records in work:
            encode_batch(encoder, records, attempts)
        best = min(best, time.perf_counter() - started)
    return best / (len(work) * 100) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    native = batch._native
    if native is None:
        sys.exit("ferry.worker._encode is not built (python3 setup.py build_ext --inplace) or FERRY_NATIVE=0")
    print(f"{'values':<16} {'Python µs/record':>17} {'C µs/record':>12} {'speed-up':>9}")
    for label, headers in (("data (JSON)", JSON_HEADERS), ("data_base64", [])):
        work = batches(a.batches, headers)
        batch._native = None
        python = per_record_us(work, a.repeat)
        batch._native = native
        c = per_record_us(work, a.repeat)
        print(f"{label:<16} {python:>17.3f} {c:>12.3f} {python / c:>8.1f}×")


if __name__ == "__main__":
    main()
