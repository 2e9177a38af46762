"""Transactions over HTTP: prepare + commit beside a plain produce of the same records, one run.

    python3 -m bench.transactions [--seconds 10] [--concurrency 32,128,256]

One ``ferry gateway`` process on the embedded broker; a closed-loop client (``concurrency``
connections, keep-alive, one request in flight on each) in this process, on uvloop with a bare
HTTP/1.1 client (bench/_raw_http.py) so that it leaves the two cores to the gateway and the broker
(aiohttp's client cost about 0.14 ms of CPU per request). Each row runs once per concurrency given
and keeps the run with the most operations/s (at few in flight a transaction waits on its three
writes in a row, not on CPU); ``--concurrency 1`` measures one at a time. Every run has a broker
and a gateway of its own, started for it and warmed up for 2 s: the embedded broker (memory only)
spends more CPU per request the more it holds, so runs on one broker slowed as it filled. Rows,
for 1 and for 10 records:

- ``produce``: ``POST /api/v1/topics/{topic}/records`` — the baseline;
- ``txn``: ``POST /api/v1/transactions`` (prepare), then ``POST .../{id}/commit`` — one
  transaction is both requests, so its latency is their sum.

Printed per row: operations/s (a transaction is one operation), records/s, p50/p99 latency of each
step, the gateway's, the broker's and the client's CPU per operation; then the cost of a
transaction as a ratio to a plain produce of the same records. Goals (issue #18): a
prepare+commit of one record ≤ 3× a plain produce; ≥ 5,000 transactions/s per gateway process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bench import _results
from bench._harness import cpu_seconds, fresh_broker, metrics, pythonpath
from bench._raw_http import Connection
from ferry.devstack import embedded

TOKEN = "bench-token"
TOPIC = "bench.txn"
CHECK_URL = "http://127.0.0.1:9/check"
"""Never asked: every prepare's timeout outlasts the run."""


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


async def run(
    port: int, kind: str, per: int, seconds: float, concurrency: int, check_url: str = CHECK_URL
) -> dict[str, Any]:
    records = [{"key": f"k{i}", "value": {"n": i, "pad": "x" * 80}} for i in range(per)]
    body_produce = orjson.dumps({"records": records})
    body_prepare = orjson.dumps(
        {
            "records": [{"topic": TOPIC, **r} for r in records],
            "check_url": check_url,
            "timeout_ms": 600_000,
        }
    )
    steps: dict[str, list[float]] = {"produce": [], "prepare": [], "commit": [], "total": []}
    errors = 0
    deadline = time.monotonic() + seconds

    async def one(conn: Connection) -> None:
        nonlocal errors
        t0 = time.perf_counter()
        if kind == "produce":
            status, _ = await conn.post(f"/api/v1/topics/{TOPIC}/records", body_produce)
            errors += status != 200
            steps["produce"].append(time.perf_counter() - t0)
        else:
            status, answer = await conn.post("/api/v1/transactions", body_prepare)
            if status != 201:
                errors += 1
                return
            t1 = time.perf_counter()
            status, _ = await conn.post(f"/api/v1/transactions/{orjson.loads(answer)['id']}/commit")
            errors += status != 200
            t2 = time.perf_counter()
            steps["prepare"].append(t1 - t0)
            steps["commit"].append(t2 - t1)
        steps["total"].append(time.perf_counter() - t0)

    async def loop() -> None:
        conn = Connection("127.0.0.1", port, {"Authorization": f"Bearer {TOKEN}"})
        try:
            while time.monotonic() < deadline:
                await one(conn)
        finally:
            conn.close()

    started = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    ops = len(steps["total"])
    return {"ops": ops / elapsed, "steps": steps, "errors": errors}


@contextlib.contextmanager
def fresh_stack(work: Path, db_url: str) -> Iterator[tuple[int, embedded.ServiceProcess, embedded.ServiceProcess]]:
    """A new embedded broker and a gateway on it: (the gateway's port, the gateway, the broker).
    The embedded broker spends more CPU per request the more it holds, so every run gets its own."""
    with fresh_broker(work, TOPIC, 6) as broker:
        port = embedded.free_port()
        env = {
            "PYTHONPATH": pythonpath(),
            "FERRY_KAFKA_BOOTSTRAP": f"127.0.0.1:{broker.port}",
            "FERRY_DB_URL": db_url,
            "FERRY_ADMIN_TOKEN": TOKEN,
            "FERRY_GATEWAY_PORT": str(port),
            "FERRY_LOG_LEVEL": "WARNING",
        }
        argv = [sys.executable, "-m", "ferry.cli", "gateway"]
        gateway = embedded.ServiceProcess("gateway", argv, port, work / "gateway.log", env=env).start()
        try:
            gateway.wait_ready(60)
            yield port, gateway, broker
        finally:
            gateway.stop()


def measured(
    work: Path, db_url: str, kind: str, per: int, seconds: float, level: int, check_url: str = CHECK_URL
) -> dict[str, Any]:
    """One run on a fresh broker and gateway (after a 2 s warm-up), with the CPU each process spent
    per operation."""
    with fresh_stack(work, db_url) as (port, gateway, broker):
        uvloop.run(run(port, kind, per, 2, level, check_url))  # warm-up
        assert gateway.proc is not None and broker.proc is not None
        cpu0, broker0, client0 = cpu_seconds(gateway.proc.pid), cpu_seconds(broker.proc.pid), time.process_time()
        r = uvloop.run(run(port, kind, per, seconds, level, check_url))
        ops = max(1, len(r["steps"]["total"]))
        r["cpu_ms_per_op"] = 1000 * (cpu_seconds(gateway.proc.pid) - cpu0) / ops
        r["broker_ms_per_op"] = 1000 * (cpu_seconds(broker.proc.pid) - broker0) / ops
        r["client_ms_per_op"] = 1000 * (time.process_time() - client0) / ops
        r["in_flight"] = level
        r["per_committed_entry"] = per_committed_entry(port) if kind == "txn" else None
        return r


def per_committed_entry(port: int) -> float:
    """Transactions per ``committed`` entry the gateway wrote since it started (its /metrics)."""
    gauges = metrics(port)
    entries = gauges.get("ferry_gateway_txn_log_committed_entries", 0.0)
    return gauges.get("ferry_gateway_txn_log_committed_transactions", 0.0) / entries if entries else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--concurrency", default="32,128,256", help="requests in flight, tried per row")
    ap.add_argument(
        "--check-url",
        default=CHECK_URL,
        help="the prepares' check_url (a host name, e.g. http://localhost:9/check, is resolved as a producer's is)",
    )
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-txn-"))
    try:
        from ferry.migrations import runner

        db_url = f"sqlite:///{work}/meta.db"
        runner.upgrade(db_url)
        levels = [int(c) for c in a.concurrency.split(",")]
        rows = []
        sweep: list[tuple[str, int, int, float]] = []
        for per in (1, 10):
            for kind in ("produce", "txn"):
                best: dict[str, Any] | None = None
                for level in levels:
                    r = measured(work, db_url, kind, per, a.seconds, level, a.check_url)
                    sweep.append((kind, per, level, r["ops"]))
                    if best is None or r["ops"] > best["ops"]:
                        best = r
                assert best is not None
                rows.append((kind, per, best))
        print(
            f"\nbench.transactions: {a.seconds:g} s per run, {'/'.join(map(str, levels))} in flight per row "
            "(the best run shown), each run on a fresh embedded broker and gateway\n"
        )
        head = (
            "rec/op",
            "in flight",
            "ops/s",
            "records/s",
            "p50 ms",
            "p99 ms",
            "prepare p50",
            "commit p50",
            "CPU ms/op",
            "broker ms/op",
            "client ms/op",
            "errors",
        )
        print(f"{'kind':8} " + " ".join(f"{h:>11}" for h in head))
        for kind, per, r in rows:
            st = r["steps"]
            print(
                f"{kind:8} {per:>11} {r['in_flight']:>11} {r['ops']:>11,.0f} {r['ops'] * per:>11,.0f} "
                f"{pct(st['total'], 0.5):>11.2f} "
                f"{pct(st['total'], 0.99):>11.2f} {pct(st['prepare'], 0.5):>11.2f} {pct(st['commit'], 0.5):>11.2f} "
                f"{r['cpu_ms_per_op']:>11.2f} {r['broker_ms_per_op']:>11.2f} {r['client_ms_per_op']:>11.2f} "
                f"{r['errors']:>11}"
            )
        print("\nevery run (operations/s):")
        for kind, per in dict.fromkeys((k, p) for k, p, _, _ in sweep):
            points = ", ".join(f"{lv} in flight {ops:,.0f}" for k, p, lv, ops in sweep if (k, p) == (kind, per))
            print(f"  {kind:8} {per:>3}: {points}")
        by = {(k, p): r for k, p, r in rows}
        for per in (1, 10):
            tx, pr = by[("txn", per)], by[("produce", per)]
            slower = statistics.median(tx["steps"]["total"]) / statistics.median(pr["steps"]["total"])
            print(
                f"\n{per} record(s): a transaction costs {pr['ops'] / tx['ops']:.2f}x a plain produce in throughput, "
                f"{tx['cpu_ms_per_op'] / pr['cpu_ms_per_op']:.2f}x in gateway CPU, "
                f"{tx['broker_ms_per_op'] / pr['broker_ms_per_op']:.2f}x in broker CPU, "
                f"{slower:.2f}x in p50 latency; {tx['per_committed_entry']:.1f} transactions per `committed` entry"
            )
        print(f"goal: <= 3x for one record, >= 5,000 transactions/s; measured {by[('txn', 1)]['ops']:,.0f}/s")
        _results.save(
            "transactions",
            _results.command_line("python3 -m bench.transactions", ap, a),
            [
                "records",
                "plain produce ops/s",
                "transactions/s",
                "transaction ÷ produce (throughput)",
                "prepare p50 ms",
                "commit p50 ms",
                "gateway CPU ms: produce · transaction",
                "broker CPU ms: produce · transaction",
            ],
            [
                [
                    per,
                    f"{by[('produce', per)]['ops']:,.0f}",
                    f"{by[('txn', per)]['ops']:,.0f}",
                    f"{by[('produce', per)]['ops'] / by[('txn', per)]['ops']:.1f}×",
                    f"{pct(by[('txn', per)]['steps']['prepare'], 0.5):.1f}",
                    f"{pct(by[('txn', per)]['steps']['commit'], 0.5):.1f}",
                    f"{by[('produce', per)]['cpu_ms_per_op']:.2f} · {by[('txn', per)]['cpu_ms_per_op']:.2f}",
                    f"{by[('produce', per)]['broker_ms_per_op']:.2f} · {by[('txn', per)]['broker_ms_per_op']:.2f}",
                ]
                for per in (1, 10)
            ],
            f"one gateway, each row the best of {'/'.join(map(str, levels))} in flight (transactions: "
            f"{by[('txn', 1)]['in_flight']} and {by[('txn', 10)]['in_flight']}), {a.seconds:g} s per run, each on a "
            f"fresh broker and gateway; prepares name check_url {a.check_url}",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
