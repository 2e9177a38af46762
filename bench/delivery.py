"""Delivered records/s: the naive hand-written loop vs the Ferry worker (ordering=key), same records,
same endpoint, one run; p50/p99 record-timestamp → endpoint latency; worker RSS behind a slow endpoint.

Run: python3 bench/delivery.py [--records 200000] [--partitions 12] [--keys 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from bench import _results, naive_loop
from bench._harness import Stack, cpu_seconds, rss_mb, steady_rate, sub

# FERRY_BENCH_PROFILE=DIR profiles the worker with cProfile (where does its time go?).
PROFILE_DIR = os.environ.get("FERRY_BENCH_PROFILE")


def produce(bootstrap: str, topic: str, partitions: int, n: int, keys: int, size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    value = b"x" * size
    for i in range(n):
        k = i % keys
        while True:
            try:
                p.produce(topic, key=f"k{k}".encode(), value=value, partition=k % partitions)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


def run_ferry(s: Stack, topic: str, n: int, name: str, extra: dict[str, Any]) -> tuple[float, float]:
    """A static worker (ordering=key) on ``topic`` until the endpoint counted ``n``: (the worker's
    CPU seconds from the first record received to the last, its peak RSS MB)."""
    profile = ["-m", "cProfile", "-o", f"{PROFILE_DIR}/{name}.prof"] if PROFILE_DIR else []
    w = s.worker(name, [sub(name, [topic], s.ep, **extra)], argv_prefix=profile)
    assert w.proc is not None
    pid = w.proc.pid
    started = time.monotonic()
    cpu_at_first: float | None = None
    peak = 0.0
    try:
        while True:
            count = s.stats()["count"]
            if count and cpu_at_first is None:
                cpu_at_first = cpu_seconds(pid)
            if count >= n:
                return cpu_seconds(pid) - (cpu_at_first or 0.0), peak
            assert w.alive(), w.log_tail()
            peak = max(peak, rss_mb(pid))
            if time.monotonic() - started > 600:
                raise TimeoutError("worker did not finish in 600 s")
            time.sleep(0.05)
    finally:
        w.stop()


FILTER = "kafkapartition >= 0 AND LENGTH(partitionkey) > 0 AND type <> 'x' AND source <> 'y'"


def filter_cost(s: Stack, n: int, window: int, rounds: int = 3) -> None:
    """The same worker on the same records, without a filter and with a four-clause CESQL filter
    that passes every record: what filtering costs a worker pushing to a real endpoint. The two
    alternate ``rounds`` times (warm-up and a busy neighbour hit both alike); each row shows its
    median round."""
    cases: tuple[tuple[str, dict[str, Any]], ...] = (
        ("no filter", {"max_in_flight": window}),
        ("CESQL, 4 clauses, passes all", {"max_in_flight": window, "filter": {"sql": FILTER}}),
    )
    runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in cases}
    for i in range(rounds):
        for j, (label, extra) in enumerate(cases):
            s.reset()
            cpu, _ = run_ferry(s, "bench", n, f"bench-{i}-{j}", extra)
            rate = steady_rate(s.stats(), n)
            runs[label].append((rate, n / cpu))
            print(f"round {i + 1}: {label:32} {rate:10,.0f} records/s {n / cpu:10,.0f} records/CPU-s", flush=True)
    rows: list[tuple[str, float, float]] = []
    for label, _ in cases:
        rates = sorted(r for r, _ in runs[label])
        per_cpu = sorted(c for _, c in runs[label])
        rows.append((label, rates[len(rates) // 2], per_cpu[len(per_cpu) // 2]))
    base = rows[0]
    table = [
        [r[0], f"{r[1]:,.0f}", f"{r[2]:,.0f}", f"{r[1] / base[1] - 1:+.1%}", f"{r[2] / base[2] - 1:+.1%}"] for r in rows
    ]
    _results.save(
        "filter_worker",
        f"python3 bench/delivery.py --filter-only --records {n}",
        ["worker, 12 partitions, HTTP endpoint", "records/s", "records/CPU-s", "records/s change", "per CPU change"],
        table,
        f"ordering=key, {window} in flight per partition, one endpoint process; median of {rounds} alternating rounds",
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--in-flight", type=int, default=128)
    ap.add_argument("--rss-records", type=int, default=12_000)
    ap.add_argument(
        "--filter-only",
        action="store_true",
        help="only the worker, without and with a CESQL filter that passes every record",
    )
    a = ap.parse_args()
    load_at_start = os.getloadavg()[0]
    with Stack() as s:
        print(f"producing {a.records:,} records ({a.keys} keys, {a.partitions} partitions, 100 B)...", flush=True)
        produce(s.bootstrap, "bench", a.partitions, a.records, a.keys, 100)
        per_partition_window = max(1, a.in_flight // a.partitions)
        if a.filter_only:
            filter_cost(s, a.records, per_partition_window)
            return

        s.reset()
        cpu0 = time.process_time()
        naive_s = asyncio.run(
            naive_loop.run(s.bootstrap, "bench", a.partitions, f"{s.ep}/hook", a.records, a.in_flight)
        )
        naive_cpu = time.process_time() - cpu0
        naive = s.stats()

        s.reset()
        started = time.monotonic()
        ferry_cpu, ferry_rss = run_ferry(s, "bench", a.records, "bench-key", {"max_in_flight": per_partition_window})
        ferry_s = time.monotonic() - started
        ferry = s.stats()

        # Memory: 12 partitions of 1 KB records behind an endpoint answering in 200 ms.
        produce(s.bootstrap, "bench-1k", 12, a.rss_records, 1200, 1000)
        s.reset(delay_s=0.2)
        _, slow_rss = run_ferry(s, "bench-1k", a.rss_records, "bench-slow", {"max_in_flight": 100})

        naive_rate, ferry_rate = steady_rate(naive, a.records), steady_rate(ferry, a.records)
        print()
        print(f"{'':28} {'records/s':>10} {'whole run':>10} {'records/CPU-s':>14} {'p50 ms':>8} {'p99 ms':>8}")
        rows = [
            ("naive loop (baseline)", naive_rate, naive_s, naive_cpu, naive),
            ("ferry worker, ordering=key", ferry_rate, ferry_s, ferry_cpu, ferry),
        ]
        for label, rate, secs, cpu, st in rows:
            print(
                f"{label:28} {rate:10.0f} {a.records / secs:10.0f} {a.records / cpu:14.0f} "
                f"{st['p50_ms']:8.1f} {st['p99_ms']:8.1f}"
            )
        print(
            f"ratio ferry/naive: {ferry_rate / naive_rate:.2f}x records/s, {naive_cpu / ferry_cpu:.2f}x records/CPU-s "
            f"(in flight: naive {a.in_flight} total, ferry {per_partition_window} per partition x {a.partitions})"
        )
        print(f"ferry worker peak RSS: {ferry_rss:.0f} MB")
        print(f"ferry worker peak RSS, 12 partitions of 1 KB records, endpoint answering in 200 ms: {slow_rss:.0f} MB")
        print(
            "records/s: first to last record received by the endpoint; whole run: from the start of the "
            "baseline's loop / the worker process (start-up included)"
        )
        print("latency is record timestamp -> endpoint receipt; the backlog is produced first, so it includes queueing")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        _results.save(
            "delivery",
            _results.command_line("python3 bench/delivery.py", ap, a),
            ["", "naive loop", "Ferry worker", "Ferry ÷ naive"],
            [
                ["records/s", f"{naive_rate:,.0f}", f"{ferry_rate:,.0f}", f"**{ferry_rate / naive_rate:.2f}×**"],
                [
                    "records per CPU-second",
                    f"{a.records / naive_cpu:,.0f}",
                    f"{a.records / ferry_cpu:,.0f}",
                    f"**{naive_cpu / ferry_cpu:.2f}×**",
                ],
            ],
            f"{a.records:,} records of 100 B, {a.partitions} partitions, {a.keys} keys, `ordering=key`; "
            f"load average {load_at_start:.1f} on {os.cpu_count()} cores at the start",
        )


if __name__ == "__main__":
    main()
