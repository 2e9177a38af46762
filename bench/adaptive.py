"""Adaptive concurrency beside fixed windows, against an endpoint whose capacity changes mid-run.

    python3 bench/adaptive.py [--phases 8:15,32:15,4:15] [--service-ms 20] [--queue 128] [--fixed 4,16,64,256]
                              [--workers 1] [--stagger-s 0]

One broker, one topic of 4 partitions holding more records than the run can deliver, and the
endpoint of bench/_capacity_endpoint.py: it serves C requests at once for ``--service-ms`` each,
queues ``--queue`` more and answers 503 beyond, with C following the phases (``C:seconds``). A
static worker (``ordering: none``, 1,000 attempts with 20–200 ms backoff, a 500 ms push timeout)
runs the same records once per configuration: fixed windows of 4, 16, 64 and 256 in flight in
all (``--fixed``; a quarter per partition), then ``"concurrency": {"mode": "adaptive", "min": 1, "max": 256}``.
With ``--workers`` 2 or 4, as many static workers split the partitions and share the endpoint,
each starting ``--stagger-s`` after the one before (each adaptive worker learns its own limit,
told in its assignment how many workers share the endpoint, as the coordinator tells them; the
table shows the limits' sum), and the result is saved as ``adaptive_workers``. With
``--coordinated`` they are a cluster's workers instead (ZooKeeper and a coordinator, which assigns
the partitions and moves them as workers join).

Per configuration and phase, from what the endpoint saw: goodput (records processed for the
first time, per second), latency from arrival to answer (p50; p99 once 5 s of the phase are
past), 503s, timeouts (served after the worker gave up), duplicates (records processed again),
retries (requests beyond the first per record), and how long until a whole second ran at ≥ 80 %
of the phase's capacity with ≤ 5 % of its requests refused. Then a verdict on the issue's goals;
the p99 goal is against the endpoint's unloaded latency, measured: the median latency of the
requests it served without waiting for a slot, over every configuration's run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._endpoint import percentile
from bench._harness import BENCH, Stack, create_topic
from bench._results import command_line, save
from ferry.devstack import embedded
from ferry.subscription import origin

TOPIC = "adaptive"
PARTITIONS = 4
FIXED = (4, 16, 64, 256)
ADAPTIVE_MAX = 256
SETTLE_S = 5.0


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)  # type: ignore[no-any-return]


def post(url: str, doc: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()


@dataclass
class Phase:
    capacity: int
    seconds: float
    start: float = 0.0  # seconds since the endpoint's clock started

    def holds(self, t: float) -> bool:
        return self.start <= t < self.start + self.seconds


def phases_of(text: str) -> list[Phase]:
    out, at = [], 0.0
    for part in text.split(","):
        c, s = part.split(":")
        out.append(Phase(int(c), float(s), at))
        at += float(s)
    return out


def produce(bootstrap: str, n: int) -> None:
    from confluent_kafka import Producer

    create_topic(bootstrap, TOPIC, PARTITIONS)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    for i in range(n):
        while True:
            try:
                p.produce(TOPIC, key=f"k{i % 1000}".encode(), value=b"x" * 100, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)


def subscription(name: str, ep: str, window: int | None) -> dict[str, Any]:
    per_partition = max(1, (window or ADAPTIVE_MAX) // PARTITIONS)
    doc: dict[str, Any] = {
        "name": name,
        "topics": [TOPIC],
        "endpoint": {"url": f"{ep}/hook", "timeout_ms": 500},
        "ordering": "none",
        "max_in_flight": per_partition,
        "retry": {"max_attempts": 1000, "initial_backoff_ms": 20, "max_backoff_ms": 200},
    }
    if window is None:
        doc["concurrency"] = {"mode": "adaptive", "min": 1, "max": ADAPTIVE_MAX}
    return doc


def run(
    s: Stack,
    ep: str,
    name: str,
    window: int | None,
    phases: list[Phase],
    workers: int = 1,
    stagger_s: float = 0.0,
    zk: str | None = None,
) -> tuple[list[list[Any]], list[Any]]:
    """One configuration over every phase: the endpoint's rows, and the workers' limit samples
    ``(seconds since the endpoint's clock started, sum of the limits)``. With ``zk`` (a ZooKeeper
    connect string), the workers are a cluster's: a coordinator assigns them the partitions."""
    post(f"{ep}/start", {"phases": [[p.capacity, p.seconds] for p in phases]})
    sub = subscription(name, ep, window)
    started = time.monotonic()
    ws: list[embedded.ServiceProcess] = []
    cluster = coordinator = None
    if zk is not None:
        from tests.support.cluster import Cluster

        (s.tmp / name).mkdir()
        cluster = Cluster(s.tmp / name, zk, s.bootstrap)
        cluster.add_subscription(sub)
        coordinator = cluster.coordinator()
    total = sum(p.seconds for p in phases)
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + total + 120 + workers * stagger_s
    try:
        while time.monotonic() < deadline:
            if len(ws) < workers and time.monotonic() - started >= len(ws) * stagger_s:
                i = len(ws)
                if cluster is not None:
                    ws.append(cluster.worker(f"{name}-{i}").wait_ready(60))
                    continue
                mine = [{"subscription": name, "topic": TOPIC, "partition": p} for p in range(i, PARTITIONS, workers)]
                shared = {origin(sub["endpoint"]["url"]): workers} if workers > 1 else None
                ws.append(s.worker(f"{name}-{i}", [sub], partitions=mine if workers > 1 else None, origins=shared))
                continue
            for w in ws:
                assert w.alive(), w.log_tail()
            t0 = get(f"{ep}/figures?rows=0")["t0"]
            if t0 is not None:
                now = time.monotonic() - t0
                if now > total:
                    break
                limits = [
                    gate["limit"]
                    for w in ws
                    for gate in get(f"http://127.0.0.1:{w.port}/stats").get("endpoints", {}).values()
                ]
                if limits:
                    samples.append((now, sum(limits)))
            time.sleep(0.5)
        else:
            raise TimeoutError(f"{name}: the endpoint saw no request, or the phases did not end")
    finally:
        if coordinator is not None:  # first: no partition moves while the workers stop
            coordinator.stop()
        for w in ws:
            w.stop()
        if cluster is not None:
            cluster.close()
    return get(f"{ep}/figures")["rows"], samples


def judge(rows: list[list[Any]], samples: list[Any], phases: list[Phase], service_s: float) -> list[dict[str, Any]]:
    """Per phase: the figures of the table (see the module docstring)."""
    asked_before: set[str] = set()
    again: list[float] = []  # arrival times of requests for a record already asked for
    for arrived, _answered, _status, _gone, cid, _waited in sorted(rows, key=lambda r: r[0]):
        if cid in asked_before:
            again.append(arrived)
        asked_before.add(cid)
    processed: set[str] = set()
    first: list[float] = []  # answer times of first processings
    dup_at: list[float] = []
    for _arrived, answered, status, _gone, cid, _waited in sorted(rows, key=lambda r: r[1]):
        if status != 200:
            continue
        if cid in processed:
            dup_at.append(answered)
        else:
            processed.add(cid)
            first.append(answered)
    out = []
    for ph in phases:
        in_ph = [r for r in rows if ph.holds(r[1])]
        ok = [r for r in in_ph if r[2] == 200]
        lat = sorted((r[1] - r[0]) * 1000 for r in ok)
        settled = sorted((r[1] - r[0]) * 1000 for r in ok if r[1] >= ph.start + SETTLE_S)
        new = sum(1 for t in first if ph.holds(t))
        capacity_rate = ph.capacity / service_s
        adapt: float | None = None
        for b in range(int(ph.seconds)):
            lo, hi = ph.start + b, ph.start + b + 1
            good = sum(1 for t in first if lo <= t < hi)
            asked = [r for r in rows if lo <= r[0] < hi]
            refused = sum(1 for r in asked if r[2] == 503)
            if good >= 0.8 * capacity_rate and refused <= 0.05 * max(1, len(asked)):
                adapt = float(b + 1)
                break
        limits = [lim for t, lim in samples if ph.holds(t)]
        out.append(
            {
                "capacity": ph.capacity,
                "goodput": new / ph.seconds,
                "of_capacity": new / ph.seconds / capacity_rate,
                "p50": percentile(lat, 0.5),
                "p99_settled": percentile(settled, 0.99),
                "refused": sum(1 for r in in_ph if r[2] == 503),
                "timeouts": sum(1 for r in ok if r[3]),
                "duplicates": sum(1 for t in dup_at if ph.holds(t)),
                "retries": sum(1 for t in again if ph.holds(t)),
                "adapt_s": adapt,
                "limit": limits[-1] if limits else None,
            }
        )
    return out


def unloaded_ms(runs: list[list[list[Any]]]) -> float:
    """The endpoint's unloaded latency: the median, over every configuration's run, of the requests
    it served without waiting for a slot (arrival to answer, as every latency here)."""
    return percentile(sorted((r[1] - r[0]) * 1000 for rows in runs for r in rows if r[2] == 200 and not r[5]), 0.5)


def verdict(results: dict[str, list[dict[str, Any]]], service_ms: float, unloaded: float) -> list[str]:
    """The issue's goals, phase by phase, for the adaptive row."""
    lines = []
    ad = results["adaptive"]
    for i, a in enumerate(ad):
        fixed = {k: v[i] for k, v in results.items() if k != "adaptive"}
        best = max(fixed.values(), key=lambda f: f["goodput"])
        # the smallest fixed window that delivers what adaptive delivers (or the best one)
        matching = next((f for f in fixed.values() if f["goodput"] >= 0.9 * a["goodput"]), best)
        bad_a = a["refused"] + a["timeouts"]
        bad_m = matching["refused"] + matching["timeouts"]
        lines.append(
            f"C={a['capacity']}: goodput {a['goodput'] / best['goodput']:.0%} of the best fixed "
            f"(goal ≥ 90%) · p99 after {SETTLE_S:.0f} s {a['p99_settled'] / unloaded:.2f}× the unloaded latency "
            f"(goal ≤ 2×; {a['p99_settled'] / service_ms:.2f}× the service time) · 503s+timeouts {bad_a} vs {bad_m} "
            f"for the fixed window matching its goodput (goal ≥ 5× fewer) · adapted in "
            f"{a['adapt_s'] if a['adapt_s'] is not None else '—'} s (goal ≤ 5 s)"
        )
    return lines


def summary(results: dict[str, list[dict[str, Any]]]) -> tuple[list[str], list[list[str]]]:
    """One row per configuration for docs/BENCHMARKS.md: goodput and p99 per phase, and what the
    endpoint suffered over the whole run."""
    caps = [f["capacity"] for f in next(iter(results.values()))]
    cols = ["in flight", *(f"C={c}: goodput/s · p99 ms" for c in caps), "503s + timeouts", "duplicates"]
    rows = []
    for label, per_phase in results.items():
        cells = [f"{f['goodput']:,.0f} · {f['p99_settled']:.0f}" for f in per_phase]
        bad = sum(f["refused"] + f["timeouts"] for f in per_phase)
        rows.append([label, *cells, f"{bad:,}", f"{sum(f['duplicates'] for f in per_phase):,}"])
    return cols, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", default="8:15,32:15,4:15")
    ap.add_argument("--service-ms", type=float, default=20.0)
    ap.add_argument("--queue", type=int, default=128)
    ap.add_argument("--fixed", default=",".join(map(str, FIXED)), help="the fixed windows run beside adaptive")
    ap.add_argument("--workers", type=int, default=1, choices=(1, 2, 4), help="workers sharing the endpoint")
    ap.add_argument("--stagger-s", type=float, default=0.0, help="between one worker's start and the next's")
    ap.add_argument(
        "--coordinated", action="store_true", help="the workers of a cluster (ZooKeeper, a coordinator), not static"
    )
    a = ap.parse_args()
    phases = phases_of(a.phases)
    if any(p.seconds <= SETTLE_S for p in phases):
        sys.exit(f"--phases: every phase must last more than {SETTLE_S:g} s (its p99 is taken after that)")
    try:
        fixed = [int(w) for w in a.fixed.split(",")]
    except ValueError:
        sys.exit(f"--fixed: {a.fixed!r} is not a comma-separated list of windows, e.g. 4,16")
    if min(fixed) < 1:
        sys.exit("--fixed: every window must be at least 1")
    service_s = a.service_ms / 1000
    need = int(sum(p.capacity / service_s * p.seconds for p in phases) * 1.5)
    with Stack(prefix="ferry-adaptive-") as s, contextlib.ExitStack() as services:
        zk = None
        if a.coordinated:
            zk_proc = embedded.zookeeper(s.tmp / "zk").start().wait_ready(60)
            services.callback(zk_proc.stop)
            zk = f"127.0.0.1:{zk_proc.port}"
        print(f"producing {need:,} records ({PARTITIONS} partitions)...", flush=True)
        produce(s.bootstrap, need)
        port = embedded.free_port()
        argv = [sys.executable, str(BENCH / "_capacity_endpoint.py"), str(port)]
        argv += ["--service-ms", str(a.service_ms), "--queue", str(a.queue)]
        s.service("capacity-endpoint", argv, port)
        ep = f"http://127.0.0.1:{port}"
        results: dict[str, list[dict[str, Any]]] = {}
        every_run = []
        for window in (*fixed, None):
            label = f"fixed {window}" if window else "adaptive"
            rows, samples = run(s, ep, f"ad-{window or 'adaptive'}", window, phases, a.workers, a.stagger_s, zk)
            results[label] = judge(rows, samples, phases, service_s)
            every_run.append(rows)
            print(f"{label}: {len(rows):,} requests", flush=True)

    command = command_line("python3 bench/adaptive.py", ap, a)
    print(f"\n`{command}` — service {a.service_ms:g} ms, queue {a.queue}\n")
    print(
        "| in flight | C | goodput/s | of capacity | p50 ms | p99 ms after 5 s | 503s | timeouts | duplicates "
        "| retries | s to adapt | limit at end |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, per_phase in results.items():
        for f in per_phase:
            print(
                f"| {label} | {f['capacity']} | {f['goodput']:,.0f} | {f['of_capacity']:.0%} | {f['p50']:.0f} "
                f"| {f['p99_settled']:.0f} | {f['refused']:,} | {f['timeouts']:,} | {f['duplicates']:,} "
                f"| {f['retries']:,} | {f['adapt_s'] if f['adapt_s'] is not None else '—'} "
                f"| {f['limit'] if f['limit'] is not None else '—'} |"
            )
    unloaded = unloaded_ms(every_run)
    print(f"\nthe endpoint's unloaded latency (median of the requests it served without a wait): {unloaded:.1f} ms")
    for line in verdict(results, a.service_ms, unloaded):
        print(line)
    cols, rows = summary(results)
    note = (
        f"service {a.service_ms:g} ms, queue {a.queue}; p99 once 5 s of a phase are past; the endpoint's "
        f"unloaded latency {unloaded:.1f} ms (the median of the requests it served without a wait)"
    )
    if a.workers == 1:
        save("adaptive", command, cols, rows, note)
    else:
        save("adaptive_workers", command, cols, rows, note)


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
