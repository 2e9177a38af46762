"""Record timestamp → endpoint latency at steady rates, ordering=key, and the worker's maximum
single-record rate measured in the same run (a backlog run), so "half of the maximum" is known.

Run: python3 bench/latency.py [--rates 500,1000,2000,3000] [--seconds 10] [--backlog 30000]
     [--half] [--plot docs/bench/latency.png]

1. Backlog: ``--backlog`` records are produced first, then a worker (same settings as below)
   delivers them; records/s = the maximum single-record rate on this machine.
2. Steady: for each rate, a producer at that rate (CreateTime timestamps, ``linger.ms=1``) for
   ``--seconds``; one worker (12 partitions, ``max_in_flight`` 32) delivers to the trivial
   endpoint; p50/p95/p99 of record timestamp → endpoint receipt. ``--half`` adds half of the
   measured maximum to the rates.

The record timestamp is set by the producer when it produces, so the figure covers producer
batching, the broker, the worker's fetch and the push. Producer, broker, worker and endpoint
share the machine's cores. ``--env K=V`` passes settings to the worker (e.g. fetch settings).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer

from bench._harness import Stack, cpu_seconds, create_topic, sub
from bench.delivery import produce


def steady(s: Stack, topic: str, rate: float, seconds: float, worker_pid: int) -> dict[str, float]:
    p = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 1})
    s.reset()
    broker_pid: int = s.broker.proc.pid  # type: ignore[union-attr]
    w0, b0 = cpu_seconds(worker_pid), cpu_seconds(broker_pid)
    n = int(rate * seconds)
    value = b"x" * 100
    started = time.monotonic()
    i = 0
    # Every millisecond, produce the records that are due: a sleep per record costs more CPU than
    # the producing itself and capped the rate at ~2,000/s on the shared machine.
    while i < n:
        due = min(n, int((time.monotonic() - started) * rate) + 1)
        while i < due:
            p.produce(topic, key=f"k{i % 600}".encode(), value=value)
            i += 1
        p.poll(0)
        time.sleep(0.001)
    p.flush(30)
    produced_s = time.monotonic() - started
    deadline = time.monotonic() + 60
    while s.stats()["count"] < n and time.monotonic() < deadline:
        time.sleep(0.1)
    st = s.stats()
    per_k = 1000 / max(1, st["count"])
    cpu = {
        "worker_ms": (cpu_seconds(worker_pid) - w0) * 1000 * per_k,
        "broker_ms": (cpu_seconds(broker_pid) - b0) * 1000 * per_k,
    }
    return {"rate": rate, "achieved": n / produced_s, "n": n, **cpu, **st}


def plot(path: Path, rows: list[dict[str, float]], max_rate: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["rate"])
    xs = [r["rate"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    for key, style in (("p50_ms", "o-"), ("p95_ms", "s-"), ("p99_ms", "^-")):
        ax.plot(xs, [r[key] for r in rows], style, label=key.removesuffix("_ms"))
    ax.axhline(50, color="grey", linestyle=":", label="goal: p99 < 50 ms")
    ax.axvline(max_rate / 2, color="tab:red", linestyle="--", label=f"half of max ({max_rate / 2:,.0f}/s)")
    ax.set_yscale("log")
    ax.set_xlabel("steady rate (records/s)")
    ax.set_ylabel("record timestamp → endpoint (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize="small")
    ax.set_title("Latency vs rate, ordering=key, 12 partitions (2 shared cores)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"plot written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="500,1000,2000,3000")
    ap.add_argument("--half", action="store_true", help="also measure at half of the backlog rate")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--backlog", type=int, default=30_000, help="records of the max-rate run (0: skip)")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--in-flight", type=int, default=32, help="max_in_flight per partition")
    ap.add_argument("--env", action="append", default=[], help="K=V worker environment (repeatable)")
    ap.add_argument("--plot", type=Path, default=None)
    a = ap.parse_args()
    env = dict(kv.split("=", 1) for kv in a.env)
    rates = [float(r) for r in a.rates.split(",") if r]
    with Stack("ferry-bench-latency-") as s:
        max_rate = 0.0
        if a.backlog:
            produce(s.bootstrap, "backlog", a.partitions, a.backlog, 600, 100)
            s.reset()
            w = s.worker("backlog", [sub("backlog", ["backlog"], s.ep, max_in_flight=a.in_flight)], env=env)
            max_rate = a.backlog / s.wait_count(a.backlog, 300, [w])
            w.stop()
            print(f"backlog: {a.backlog:,} records at {max_rate:,.0f} records/s (the maximum single-record rate)")
            if a.half:
                rates.append(round(max_rate / 2, -1))
        create_topic(s.bootstrap, "lat", a.partitions)
        w = s.worker("lat", [sub("lat", ["lat"], s.ep, max_in_flight=a.in_flight)], env=env)
        s.reset()  # the backlog run's count must not satisfy the warm-up wait
        warm = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 1})
        for i in range(200):
            warm.produce("lat", key=f"k{i}".encode(), value=b"x" * 100)
        warm.flush(10)
        s.wait_count(200, 60, [w])
        rows = []
        for rate in rates:
            rows.append(steady(s, "lat", rate, a.seconds, w.proc.pid))  # type: ignore[union-attr]
            r = rows[-1]
            print(
                f"  {rate:6,.0f}/s: p50 {r['p50_ms']:.1f}  p95 {r['p95_ms']:.1f}  p99 {r['p99_ms']:.1f} ms", flush=True
            )
    print()
    print(f"worker settings: {env or 'defaults'}; max_in_flight {a.in_flight}, {a.partitions} partitions, ordering=key")
    print(f"max single-record rate (backlog run): {max_rate:,.0f} records/s; half: {max_rate / 2:,.0f}")
    print(
        f"{'rate/s':>8} {'produced/s':>10} {'delivered':>10} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'worker CPU ms/1k':>16} {'broker CPU ms/1k':>16}"
    )
    for r in sorted(rows, key=lambda r: r["rate"]):
        print(
            f"{r['rate']:>8,.0f} {r['achieved']:>10,.0f} {int(r['count']):>10,} "
            f"{r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['worker_ms']:>16.0f} {r['broker_ms']:>16.0f}"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores; other processes share them)")
    print("goal: p99 < 50 ms at half of the maximum single-record rate")
    if a.plot:
        plot(a.plot, rows, max_rate)


if __name__ == "__main__":
    main()
