"""Batch push: records/s of a naive hand-written batched loop vs the Ferry worker in batch mode, same
records, same endpoint, one run; plus the per-record cost of building the CloudEvents batch body.

Run: python3 bench/batch.py [--records 500000] [--partitions 12] [--keys 200] [--batch 100] [--ordering key]

or, for the table in docs/BENCHMARKS.md, ``--series 5``: every ordering (``--orderings``) run that
many times in a row, each run in a process of its own on a fresh broker and endpoint; every run is
printed and kept (the table shows the median and every run's ratio, not the best), and the goal
is checked on all of them: Ferry ≥ 1.0× the naive loop's records/s with ``partition`` and
``none``, ≥ 0.9× with ``key``.

The baseline consumes with confluent-kafka, POSTs 100 records per request as a JSON array of
``{"id", "data"}`` objects (up to ``--requests`` requests in flight), and commits the contiguous
prefix per partition: no ordering, retries, dead letters or offsets topic. The worker runs with
``batch.max_records`` = ``--batch`` and ``max_in_flight`` 1000. The endpoint (bench/_endpoint.py
``/batch``) counts the distinct ids inside the batches; records/s is taken from its receipt times
(first to last record, so process start-up is excluded). Records are 100 B JSON values with
``content-type: application/json`` (so they travel as ``data``).

records/CPU-s divides the records by the CPU seconds the baseline process / the worker process
used meanwhile (all threads): on a shared machine it is the steadier figure. The worker's CPU is
also shown per thread (main event loop, fetch thread, librdkafka). FERRY_BENCH_PROFILE=DIR writes
a cProfile of the worker. Compare the rows of one run, not runs with each other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

import ferry.worker.batch as batch_module
from bench import _results
from bench._harness import TICK, Stack, cpu_seconds, http, metrics, rss_mb, steady_rate
from bench.delivery import PROFILE_DIR
from ferry.devstack import embedded

VALUE = json.dumps({"order": 12345, "customer": "c-000042", "amount": 99.5, "note": "x" * 32}).encode()
assert len(VALUE) == 100
JSON_HEADERS = [("content-type", b"application/json")]


def produce(bootstrap: str, topic: str, partitions: int, n: int, keys: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    headers: list[tuple[str, str | bytes | None]] = list(JSON_HEADERS)
    for i in range(n):
        k = i % keys
        while True:
            try:
                p.produce(topic, key=f"k{k}".encode(), value=VALUE, partition=k % partitions, headers=headers)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


async def naive_batched(
    bootstrap: str, topic: str, partitions: int, url: str, total: int, per_post: int, requests: int
) -> float:
    """Consume → POST ``per_post`` records per request as a JSON array → commit the prefix. Seconds taken."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "naive-batch",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "fetch.queue.backoff.ms": 10,
            "enable.partition.eof": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    sem = asyncio.Semaphore(requests)
    done = 0
    acked: dict[int, set[int]] = {p: set() for p in range(partitions)}
    committed = dict.fromkeys(range(partitions), 0)
    loop = asyncio.get_running_loop()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=requests)) as session:

        async def post(chunk: list[tuple[int, int, bytes]]) -> None:
            nonlocal done
            body = b"[" + b",".join(b'{"id":"%d/%d","data":%s}' % (p, o, v) for p, o, v in chunk) + b"]"
            try:
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
            finally:
                sem.release()
            for p, o, _ in chunk:
                acked[p].add(o)
            for p in {p for p, _, _ in chunk}:
                while committed[p] in acked[p]:
                    acked[p].discard(committed[p])
                    committed[p] += 1
            done += len(chunk)

        started = time.monotonic()
        tasks: set[asyncio.Task[None]] = set()
        last_commit = started
        pending: list[tuple[int, int, bytes]] = []
        while done < total:
            msgs = await loop.run_in_executor(None, c.consume, 500, 0.05)
            for m in msgs:
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    continue
                pending.append((m.partition() or 0, m.offset() or 0, m.value() or b""))
            while pending and (len(pending) >= per_post or not msgs):
                chunk, pending = pending[:per_post], pending[per_post:]
                await sem.acquire()
                t = asyncio.create_task(post(chunk))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            if time.monotonic() - last_commit > 0.5:
                c.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=True)
                last_commit = time.monotonic()
            if not msgs:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - started
    c.close()
    return elapsed


def run_worker(tmp: Path, bootstrap: str, topic: str, ep: str, n: int, name: str, sub: dict) -> tuple[float, float]:  # type: ignore[type-arg]
    """A static worker for ``topic`` until the endpoint counted ``n``: (CPU seconds from the first
    record to the last, peak RSS MB). The records/s figure comes from the endpoint's receipt times."""
    assignment = tmp / f"{name}.json"
    assignment.write_text(json.dumps({"subscriptions": [{"name": name, "topics": [topic], **sub}]}))
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
    assert proc.proc is not None
    pid = proc.proc.pid
    started = time.monotonic()
    cpu_at_first: float | None = None
    peak = 0.0
    try:
        while True:
            count = http("GET", f"{ep}/stats")["count"]
            if count and cpu_at_first is None:
                cpu_at_first = cpu_seconds(pid)
            if count >= n:
                break
            assert proc.alive(), proc.log_tail()
            peak = max(peak, rss_mb(pid))
            if time.monotonic() - started > 600:
                raise TimeoutError("worker did not finish in 600 s")
            time.sleep(0.02)
        threads: dict[str, float] = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                comm = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:  # a thread that ended since the listing
                continue
            name = (
                "librdkafka" if comm.startswith("rdk:") else "main" if task.name == str(pid) else f"{comm}-{task.name}"
            )
            threads[name] = threads.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        busiest = sorted(threads.items(), key=lambda kv: -kv[1])[:4]
        print("worker CPU s by thread (whole run):", ", ".join(f"{k} {v:.1f}" for k, v in busiest))
        print("partition fetches (whole run):", fetch_gates(port))
        # CPU times come in clock ticks: a run shorter than one (a smoke-size run) counts as one.
        return max(cpu_seconds(pid) - (cpu_at_first or 0.0), 1 / TICK), peak
    finally:
        proc.stop()


def fetch_gates(port: int) -> str:
    """How often the worker's partitions held, paused (librdkafka then fetches again what it had
    queued for them) and opened again, from its metrics."""
    counts: dict[str, float] = {}
    for sample, value in metrics(port, 5).items():
        if sample.startswith("ferry_fetch_gates_total{"):
            gate = sample.split('gate="', 1)[1].split('"', 1)[0]
            counts[gate] = counts.get(gate, 0) + value
    return ", ".join(f"{g} {int(counts.get(g, 0))}" for g in ("held", "paused", "open"))


def rate(ep: str, n: int) -> tuple[float, float]:
    """Records/s as the endpoint saw them, first to last receipt (excludes process start-up), and
    records per POST."""
    st = http("GET", f"{ep}/stats")
    return steady_rate(st, n), st["count"] / max(1, st["posts"])


def encode_cost(batches: int = 300) -> dict[str, float]:
    """µs per record of encode_batch on 100-record batches, on the path the worker runs (C unless
    FERRY_NATIVE=0): JSON values as ``data`` vs the same bytes as ``data_base64``. bench/encode.py
    compares the two paths."""
    from bench.encode import batches as make_batches  # bench/encode.py imports this module
    from bench.encode import per_record_us

    return {
        label: per_record_us(make_batches(batches, headers), 10)
        for label, headers in (("data (JSON, checked)", JSON_HEADERS), ("data_base64", []))
    }


ORDERINGS = ("key", "partition", "none")
GOAL = {"key": 0.9, "partition": 1.0, "none": 1.0}
"""The least Ferry's records/s ÷ the naive loop's may be, in every run of a series."""


def series(a: argparse.Namespace, command: str) -> None:
    """``--series N``: N runs of each ordering in a row, each a fresh process; print and save them
    with ``command``, the command line that reproduces the series."""
    orderings = a.orderings.split(",")
    for ordering in orderings:
        if ordering not in ORDERINGS:
            sys.exit(f"--orderings: {ordering!r} is not one of {', '.join(ORDERINGS)}")
    runs: dict[str, list[dict[str, Any]]] = {}
    for ordering in orderings:
        runs[ordering] = []
        for i in range(a.series):
            argv = [sys.executable, __file__, "--json", "--ordering", ordering]
            for flag in ("records", "partitions", "keys", "batch", "requests", "max_in_flight"):
                argv += [f"--{flag.replace('_', '-')}", str(getattr(a, flag))]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                sys.exit(f"{ordering} run {i + 1} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
            run = json.loads(done.stdout.strip().splitlines()[-1])
            runs[ordering].append(run)
            print(
                f"{ordering:9} run {i + 1}: naive {run['naive_rate']:9,.0f} records/s, Ferry {run['ferry_rate']:9,.0f}"
                f" ({run['ferry_rate'] / run['naive_rate']:.2f}×; per CPU-s"
                f" {run['ferry_cpu_rate'] / run['naive_cpu_rate']:.2f}×), {run['ferry_per_post']:.0f} records per POST",
                flush=True,
            )
    rows = []
    for ordering, got in runs.items():
        ratios = [r["ferry_rate"] / r["naive_rate"] for r in got]
        per_cpu = [r["ferry_cpu_rate"] / r["naive_cpu_rate"] for r in got]
        met = all(x >= GOAL[ordering] for x in ratios)
        listed = ", ".join(f"{x:.2f}" for x in ratios)
        verdict = "met" if met else "not met"
        print(f"{ordering}: Ferry ÷ naive {listed}; goal ≥ {GOAL[ordering]}× in every run: {verdict}")
        rows.append(
            [
                f"`{ordering}`",
                f"{statistics.median(r['naive_rate'] for r in got):,.0f}",
                f"{statistics.median(r['ferry_rate'] for r in got):,.0f}",
                f"{statistics.median(ratios):.2f}× ({', '.join(f'{x:.2f}' for x in ratios)})",
                f"≥ {GOAL[ordering]:.1f}× in every run: {verdict}",
                f"{statistics.median(per_cpu):.2f}× ({min(per_cpu):.2f}–{max(per_cpu):.2f})",
            ]
        )
    everything = [r for got in runs.values() for r in got]
    naive = [r["naive_rate"] for r in everything]
    per_post = {o: [r["ferry_per_post"] for r in got] for o, got in runs.items()}
    broker = [r["broker_us"] for r in everything]
    note = (
        f"{a.series} runs of each ordering in a row, each on a fresh broker and endpoint; medians, and every run's "
        f"ratio in run order; broker, endpoint and both consumers share {os.cpu_count()} cores, and the naive "
        f"loop alone varied {_span(naive, ',.0f')} records/s; at most {a.batch} records per POST: Ferry averaged "
        + ", ".join(f"{_span(v, '.0f')} with `{o}`" for o, v in per_post.items())
        + f"; the broker spent {_span([b[1] for b in broker], '.1f')} µs of CPU per record in Ferry's runs "
        f"({_span([b[0] for b in broker], '.1f')} in the naive loop's); the naive loop keeps no order, retries, "
        "dead letters or offset state"
    )
    _results.save(
        "batch",
        command,
        [
            "ordering",
            "naive batched loop records/s",
            "Ferry records/s",
            f"Ferry ÷ naive ({a.series} runs, in order)",
            "goal",
            "Ferry ÷ naive per CPU-s",
        ],
        rows,
        note,
    )


def _span(values: list[float], fmt: str) -> str:
    low, high = format(min(values), fmt), format(max(values), fmt)
    return low if low == high else f"{low}–{high}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--requests", type=int, default=12, help="baseline: POSTs in flight")
    ap.add_argument("--max-in-flight", type=int, default=1000, help="worker: records in flight per partition")
    ap.add_argument("--ordering", default="key", choices=ORDERINGS)
    ap.add_argument("--series", type=int, default=0, help="run every ordering this many times; save the table")
    ap.add_argument("--orderings", default=",".join(ORDERINGS), help="--series: the orderings, in this order")
    ap.add_argument("--json", action="store_true", help="also print the run's figures as one JSON line")
    a = ap.parse_args()
    if a.series:
        series(a, _results.command_line("python3 bench/batch.py", ap, a))
        return
    with Stack() as stack:
        tmp, bootstrap, ep = stack.tmp, stack.bootstrap, stack.ep
        print(f"producing {a.records:,} records ({a.keys} keys, {a.partitions} partitions, 100 B JSON)...", flush=True)
        produce(bootstrap, "bench", a.partitions, a.records, a.keys)

        assert stack.broker.proc is not None and stack.endpoint.proc is not None
        others = {"broker": stack.broker.proc.pid, "endpoint": stack.endpoint.proc.pid}
        http("POST", f"{ep}/reset")
        cpu0, o0 = time.process_time(), {k: cpu_seconds(p) for k, p in others.items()}
        asyncio.run(naive_batched(bootstrap, "bench", a.partitions, f"{ep}/batch", a.records, a.batch, a.requests))
        naive_cpu = time.process_time() - cpu0
        naive_others = {k: cpu_seconds(p) - o0[k] for k, p in others.items()}
        naive_rate, naive_per_post = rate(ep, a.records)

        http("POST", f"{ep}/reset")
        sub = {
            "ordering": a.ordering,
            "endpoint": {"url": f"{ep}/batch"},
            "max_in_flight": a.max_in_flight,
            "batch": {"max_records": a.batch},
        }
        o0 = {k: cpu_seconds(p) for k, p in others.items()}
        ferry_cpu, ferry_rss = run_worker(tmp, bootstrap, "bench", ep, a.records, "bench-batch", sub)
        ferry_others = {k: cpu_seconds(p) - o0[k] for k, p in others.items()}
        ferry_rate, ferry_per_post = rate(ep, a.records)

        print()
        print(f"{'':44} {'records/s':>10} {'records/CPU-s':>14}")
        print(f"{f'naive batched loop ({a.batch}/POST, baseline)':44} {naive_rate:10.0f} {a.records / naive_cpu:14.0f}")
        label = f"ferry worker, batch mode ({a.batch}/POST), {a.ordering}"
        print(f"{label:44} {ferry_rate:10.0f} {a.records / ferry_cpu:14.0f}")
        print(f"records per POST: naive {naive_per_post:.1f}, ferry {ferry_per_post:.1f}")
        for k in others:
            us = (naive_others[k] / a.records * 1e6, ferry_others[k] / a.records * 1e6)
            print(f"{k} CPU µs per record during each run (start-up included): naive {us[0]:.2f}, ferry {us[1]:.2f}")
        print(
            f"ratio ferry/naive: {ferry_rate / naive_rate:.2f}x records/s, {naive_cpu / ferry_cpu:.2f}x records/CPU-s"
        )
        print(
            f"ferry worker peak RSS {ferry_rss:.0f} MB; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        path = "C" if batch_module._native is not None else "Python"
        for label, per_record in encode_cost().items():
            print(f"encoding 100-record batches ({path}), {label}: {per_record:.2f} µs/record")
        if a.json:
            figures = {
                "naive_rate": naive_rate,
                "ferry_rate": ferry_rate,
                "naive_cpu_rate": a.records / naive_cpu,
                "ferry_cpu_rate": a.records / ferry_cpu,
                "ferry_per_post": ferry_per_post,
                "broker_us": [naive_others["broker"] / a.records * 1e6, ferry_others["broker"] / a.records * 1e6],
            }
            print(json.dumps(figures))
        if os.environ.get("FERRY_BENCH_PROFILE"):
            print(f"profile: {os.environ['FERRY_BENCH_PROFILE']}/bench-batch.prof")


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
