"""Delivered records/s: the naive hand-written loop vs the Ferry worker (ordering=key), same records,
same endpoint, one run; p50/p99 record-timestamp → endpoint latency; worker RSS behind a slow endpoint.

Run: python3 bench/delivery.py [--records 200000] [--partitions 12] [--keys 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import naive_loop
from ferry import embedded

# FERRY_BENCH_PROFILE=DIR profiles the worker with cProfile (where does its time go?).
PROFILE_DIR = os.environ.get("FERRY_BENCH_PROFILE")


def http(method: str, url: str) -> dict:  # type: ignore[type-arg]
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


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


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_worker(
    tmp: Path, bootstrap: str, topic: str, ep: str, n: int, name: str, sub_extra: dict
) -> tuple[float, float]:  # type: ignore[type-arg]
    """Start a static worker for ``topic``; wait until the endpoint counted ``n``; returns (seconds, peak RSS MB)."""
    assignment = tmp / f"{name}.json"
    sub = {"name": name, "topics": [topic], "endpoint": {"url": f"{ep}/hook"}, "ordering": "key", **sub_extra}
    assignment.write_text(json.dumps({"subscriptions": [sub]}))
    port = embedded.free_port()
    profile = ["-m", "cProfile", "-o", f"{PROFILE_DIR}/{name}.prof"] if PROFILE_DIR else []
    proc = embedded.ServiceProcess(
        name,
        [sys.executable, *profile, "-m", "ferry.cli", "worker", "--assignment", str(assignment)],
        port,
        tmp / f"{name}.log",
        env={
            "FERRY_KAFKA_BOOTSTRAP": bootstrap,
            "FERRY_WORKER_METRICS_PORT": str(port),
            "FERRY_OFFSETS_TOPIC": f"__bench_{name}",
            "FERRY_LOG_LEVEL": "WARNING",
        },
    ).start()
    started = time.monotonic()
    peak = 0.0
    try:
        while http("GET", f"{ep}/stats")["count"] < n:
            assert proc.alive(), proc.log_tail()
            peak = max(peak, rss_mb(proc.proc.pid))  # type: ignore[union-attr]
            if time.monotonic() - started > 600:
                raise TimeoutError("worker did not finish in 600 s")
            time.sleep(0.05)
        return time.monotonic() - started, peak
    finally:
        proc.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--in-flight", type=int, default=128)
    ap.add_argument("--rss-records", type=int, default=12_000)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-"))
    broker = embedded.kafka_broker(tmp, embedded.free_port()).start().wait_ready(30)
    bootstrap = f"127.0.0.1:{broker.port}"
    ep_port = embedded.free_port()
    ep_proc = (
        embedded.ServiceProcess(
            "endpoint",
            [sys.executable, str(Path(__file__).parent / "_endpoint.py"), str(ep_port)],
            ep_port,
            tmp / "ep.log",
        )
        .start()
        .wait_ready(30)
    )
    ep = f"http://127.0.0.1:{ep_port}"
    try:
        print(f"producing {a.records:,} records ({a.keys} keys, {a.partitions} partitions, 100 B)...", flush=True)
        produce(bootstrap, "bench", a.partitions, a.records, a.keys, 100)
        per_partition_window = max(1, a.in_flight // a.partitions)

        http("POST", f"{ep}/reset")
        naive_s = asyncio.run(naive_loop.run(bootstrap, "bench", a.partitions, f"{ep}/hook", a.records, a.in_flight))
        naive = http("GET", f"{ep}/stats")

        http("POST", f"{ep}/reset")
        ferry_s, ferry_rss = run_worker(
            tmp, bootstrap, "bench", ep, a.records, "bench-key", {"max_in_flight": per_partition_window}
        )
        ferry = http("GET", f"{ep}/stats")

        # Memory: 12 partitions of 1 KB records behind an endpoint answering in 200 ms.
        produce(bootstrap, "bench-1k", 12, a.rss_records, 1200, 1000)
        http("POST", f"{ep}/reset?delay_s=0.2")
        _, slow_rss = run_worker(tmp, bootstrap, "bench-1k", ep, a.rss_records, "bench-slow", {"max_in_flight": 100})

        rows = [("naive loop (baseline)", naive_s, naive), ("ferry worker, ordering=key", ferry_s, ferry)]
        print()
        print(f"{'':28} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
        for label, secs, st in rows:
            print(f"{label:28} {a.records / secs:10.0f} {st['p50_ms']:8.1f} {st['p99_ms']:8.1f}")
        print(f"ratio ferry/naive: {naive_s / ferry_s:.2f}x (in flight: naive {a.in_flight} total, ", end="")
        print(f"ferry {per_partition_window} per partition x {a.partitions})")
        print(f"ferry worker peak RSS: {ferry_rss:.0f} MB")
        print(f"ferry worker peak RSS, 12 partitions of 1 KB records, endpoint answering in 200 ms: {slow_rss:.0f} MB")
        print("latency is record timestamp -> endpoint receipt; the backlog is produced first, so it includes queueing")
    finally:
        ep_proc.stop()
        broker.stop()


if __name__ == "__main__":
    main()
