"""Produce over HTTP: `ferry gateway` beside a trivial HTTP server and a naive gateway, one run.

    python3 -m bench.gateway [--seconds 10] [--connections 16,32,64,128,256]

Rows, each loaded by wrk (a separate process, keep-alive, closed loop) with the same requests, at
1 and at 100 records per request, on the embedded broker:

- ``trivial``: the gateway's own HTTP server (``ferry.gateway.httpd``) on uvloop answering 200 to
  the same requests without Kafka — the ceiling of ``ferry gateway`` on this machine;
- ``aiohttp``: the same trivial answer from aiohttp's low-level server on uvloop (one record per
  request only) — the ceiling of a gateway built on aiohttp;
- ``naive``: the obvious gateway — aiohttp handler → ``produce()`` per record → await each
  delivery callback → 200 (acks=all, idempotent, like Ferry's);
- ``ferry``: ``ferry gateway`` (admin token, no Idempotency-Key);
- ``ferry+key``: the same at 1 record per request, each request with an ``Idempotency-Key`` of its
  own (the cost of safe retries: two more writes and a read of the keys' topic per request).

Beside them, the client floor: the same records produced from Python without HTTP, as the gateway
queues them — confluent-kafka's ``produce_batch()`` of a request's 100 records with a delivery
callback per record (the least a gateway that answers each record's offset does), in a process of
its own with as many records in flight as the most connections of
the sweep carry at 100 per request. No gateway in Python can go under its CPU per record.

Each row runs once per connection count of ``--connections`` and keeps the run with the most
requests/s. Every run starts its server afresh (2 s of warm-up load), and a server that writes to
Kafka gets a fresh embedded broker too: that broker spends more CPU per request the more it holds,
so rows that ran later on one broker met a slower one. Connections: a server that answers only
once Kafka acknowledged is bound by that latency at few connections, so its maximum rate needs
more of them than a trivial server's does; with 100 records per request, a few connections
already carry thousands of records, and more cost CPU per record (Ferry did 2,816–3,012 such
requests/s at 16 connections against 2,445–2,732 at 32). Printed per row: the connections of that
run, requests/s, records/s, p50/p99 request latency (wrk's), the server's
CPU per 1,000 records; then every run of the sweep. Needs ``wrk`` on PATH (Debian:
``apt-get install wrk``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from bench import _results
from bench._harness import cpu_seconds, fresh_broker, pythonpath
from ferry.devstack import embedded

TOKEN = "bench-token"
TOPIC = "bench.gateway"


def request_records(n: int) -> list[dict[str, Any]]:
    """The records of an ``n``-record request, as every row and the client floor send them."""
    return [{"key": f"k{i}", "value": {"n": i, "pad": "x" * 80}} for i in range(n)]


COLUMNS = [
    "records per request",
    "naive gateway records/s",
    "`ferry gateway` records/s",
    "Ferry ÷ naive",
    "Ferry p99 ms",
]


# --- the two stand-ins, run as `python -m bench.gateway trivial|naive --port P` ---------------


def serve_trivial(port: int) -> None:
    import orjson
    import uvloop

    from ferry.gateway.httpd import Server
    from ferry.gateway.httpmsg import Request, Response

    async def handle(request: Request) -> Response:
        body = orjson.loads(await request.read())
        return Response(200, orjson.dumps({"results": [{"partition": 0, "offset": 0} for _ in body["records"]]}))

    async def serve() -> None:
        await Server(handle, max_body_bytes=64 * 1024 * 1024, read_timeout_s=30).start("127.0.0.1", port)
        await asyncio.Event().wait()

    uvloop.run(serve())


def serve_aiohttp(port: int) -> None:
    import uvloop
    from aiohttp import web

    async def handle(request: web.BaseRequest) -> web.Response:
        body = await request.json()
        return web.json_response({"results": [{"partition": 0, "offset": 0} for _ in body["records"]]})

    async def serve() -> None:
        # aiohttp's low-level server: no web.Application, no router
        runner = web.ServerRunner(web.Server(handle, access_log=None))  # bodies here are far under 1 MiB
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        await asyncio.Event().wait()

    uvloop.run(serve())


def serve_naive(port: int, bootstrap: str) -> None:
    from aiohttp import web
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})

    async def poll_forever() -> None:
        while True:
            await asyncio.to_thread(producer.poll, 0.05)

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        loop = asyncio.get_running_loop()
        futures = []
        for rec in body["records"]:
            fut = loop.create_future()

            def done(err: Any, msg: Any, fut: asyncio.Future[Any] = fut) -> None:
                loop.call_soon_threadsafe(fut.set_result, (msg.partition(), msg.offset()))

            producer.produce(
                request.match_info["topic"],
                value=json.dumps(rec.get("value")).encode(),
                key=(rec.get("key") or "").encode(),
                on_delivery=done,
            )
            futures.append(fut)
        results = await asyncio.gather(*futures)
        return web.json_response({"results": [{"partition": p, "offset": o} for p, o in results]})

    async def start(app: web.Application) -> None:
        app["poller"] = asyncio.create_task(poll_forever())

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.on_startup.append(start)
    app.router.add_post("/api/v1/topics/{topic}/records", handle)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def client_floor(bootstrap: str, seconds: float, in_flight: int) -> None:
    """Produce the 100-record body's records in a closed loop for ``seconds``, ``in_flight`` at most
    un-acknowledged; print one JSON line: records/s and CPU µs per record (this process, all
    threads). As ``ferry gateway`` queues them: the 100 records in one ``produce_batch()`` call,
    each with a delivery callback of its own; producer settings as its (idempotent, acks=all,
    linger 1 ms); the acknowledgements served by ``poll()`` on the same thread."""
    from confluent_kafka import Producer

    # Each record as the gateway writes it: key, and the value's compact JSON text.
    sent_records = [
        (json.dumps(r["value"], separators=(",", ":")).encode(), r["key"].encode()) for r in request_records(100)
    ]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 1})
    acked = 0

    def done(i: int, err: Any, msg: Any) -> None:
        nonlocal acked
        acked += 1

    def closed_loop(for_s: float) -> None:
        sent = 0
        deadline = time.monotonic() + for_s
        while time.monotonic() < deadline:
            batch = [
                {"value": value, "key": key, "callback": partial(done, sent + i)}
                for i, (value, key) in enumerate(sent_records)
            ]
            producer.produce_batch(TOPIC, batch)
            sent += len(batch)
            producer.poll(0)
            while sent - acked >= in_flight:
                producer.poll(0.001)
        producer.flush(30)

    closed_loop(2)  # warm-up, not counted
    acked = 0
    cpu0, started = time.process_time(), time.monotonic()
    closed_loop(seconds)
    elapsed, cpu = time.monotonic() - started, time.process_time() - cpu0
    print(json.dumps({"records_s": acked / elapsed, "cpu_us": cpu / max(1, acked) * 1e6}))


def run_floor(bootstrap: str, seconds: float, in_flight: int, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gateway",
            "floor",
            "--bootstrap",
            bootstrap,
            "--seconds",
            str(seconds),
            "--connections",
            str(in_flight // 100),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 90,
        check=True,
        env={**os.environ, **env},
    ).stdout
    doc: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return doc


# --- the run ---------------------------------------------------------------------------------


LUA = """
wrk.method = "POST"
wrk.body = [[{body}]]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {token}"
"""

KEYED = """
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end
local sent = 0
function request()
  sent = sent + 1
  wrk.headers["Idempotency-Key"] = "{run}-" .. thread_id .. "-" .. sent
  return wrk.format()
end
"""


def wrk(url: str, body: str, seconds: int, connections: int, workdir: Path, keyed: bool = False) -> dict[str, float]:
    """One wrk run; ``keyed``: every request with an Idempotency-Key never used before."""
    script = workdir / "post.lua"
    script.write_text(
        LUA.format(body=body, token=TOKEN) + (KEYED.replace("{run}", os.urandom(6).hex()) if keyed else "")
    )
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

    def pct(label: str) -> float:
        m = re.search(rf"\s{label}%\s+([\d.]+)(us|ms|s)", out)
        if m is None:
            return float("nan")
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return {"rps": rps, "p50": pct("50"), "p99": pct("99"), "errors": float(errors.group(1)) if errors else 0.0}


@contextlib.contextmanager
def fresh_server(name: str, work: Path, db_url: str) -> Iterator[tuple[embedded.ServiceProcess, str]]:
    """Server ``name`` started for one run (on a fresh broker unless it writes nothing): the
    process and the URL to load."""
    with contextlib.ExitStack() as stack:
        writes = name in ("naive", "ferry")
        bootstrap = f"127.0.0.1:{stack.enter_context(fresh_broker(work, TOPIC, 6)).port}" if writes else ""
        port = embedded.free_port()
        if name == "ferry":
            argv = [sys.executable, "-m", "ferry.cli", "gateway"]
            extra = {
                "FERRY_KAFKA_BOOTSTRAP": bootstrap,
                "FERRY_DB_URL": db_url,
                "FERRY_ADMIN_TOKEN": TOKEN,
                "FERRY_GATEWAY_PORT": str(port),
                "FERRY_MAX_BODY_BYTES": str(16 * 1024 * 1024),
                "FERRY_LOG_LEVEL": "WARNING",
            }
        else:
            argv = [sys.executable, "-m", "bench.gateway", name, "--port", str(port), "--bootstrap", bootstrap]
            extra = {}
        env = {"PYTHONPATH": pythonpath(), **extra}
        proc = embedded.ServiceProcess(name, argv, port, work / f"{name}.log", env=env).start()
        stack.callback(proc.stop)
        proc.wait_ready(60)
        time.sleep(1)
        yield proc, f"http://127.0.0.1:{port}/api/v1/topics/{TOPIC}/records"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", default="16,32,64,128,256", help="wrk connection counts tried per row")
    ap.add_argument("role", nargs="?", choices=["trivial", "aiohttp", "naive", "floor"])
    ap.add_argument("--port", type=int)
    ap.add_argument("--bootstrap")
    a = ap.parse_args()
    if a.role == "trivial":
        serve_trivial(a.port)
        return
    if a.role == "aiohttp":
        serve_aiohttp(a.port)
        return
    if a.role == "naive":
        serve_naive(a.port, a.bootstrap)
        return
    if a.role == "floor":
        client_floor(a.bootstrap, a.seconds, int(a.connections) * 100)
        return
    conns = [int(c) for c in a.connections.split(",")]
    if min(conns) < 2:
        sys.exit("--connections: each count must be at least 2 (wrk runs two threads)")
    if shutil.which("wrk") is None:
        sys.exit("bench.gateway needs wrk on PATH (apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-gw-"))
    try:
        from ferry.migrations import runner

        db_url = f"sqlite:///{work}/meta.db"
        runner.upgrade(db_url)
        rows = []
        sweep: list[tuple[str, int, dict[str, float]]] = []
        for name in ("trivial", "aiohttp", "naive", "ferry"):
            runs = [(name, 1, False)] + ([(name, 100, False)] if name != "aiohttp" else [])
            runs += [("ferry+key", 1, True)] if name == "ferry" else []
            for row, per_request, keyed in runs:
                body = json.dumps({"records": request_records(per_request)})
                best: tuple[dict[str, float], float] | None = None
                for c in conns:
                    with fresh_server(name, work, db_url) as (proc, url):
                        wrk(url, body, 2, c, work, keyed)  # warm-up
                        assert proc.proc is not None
                        cpu0 = cpu_seconds(proc.proc.pid)
                        r = wrk(url, body, a.seconds, c, work, keyed)
                        cpu = cpu_seconds(proc.proc.pid) - cpu0
                    records = r["rps"] * per_request * a.seconds
                    r["conns"] = c
                    cpu_ms = 1000 * cpu / max(1.0, records) * 1000
                    sweep.append((row, per_request, r))
                    if best is None or r["rps"] > best[0]["rps"]:
                        best = (r, cpu_ms)
                assert best is not None
                rows.append((row, per_request, *best))
        with fresh_broker(work, TOPIC, 6) as broker:
            floor = run_floor(f"127.0.0.1:{broker.port}", a.seconds, max(conns) * 100, {"PYTHONPATH": pythonpath()})
        print(
            f"\nbench.gateway: {a.seconds} s per run, wrk -t2 with -c{'/'.join(map(str, conns))} per row "
            "(the best run shown), every run on a fresh server and embedded broker, 6 partitions\n"
        )
        head = ("rec/req", "conns", "req/s", "records/s", "p50 ms", "p99 ms", "CPU ms/1k rec", "non-2xx")
        widths = (7, 5, 9, 10, 7, 7, 13, 7)
        print(f"{'server':9} " + " ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
        for name, per, r, cpu_ms in rows:
            print(
                f"{name:9} {per:>7} {r['conns']:>5.0f} {r['rps']:>9,.0f} {r['rps'] * per:>10,.0f} {r['p50']:>7.2f} "
                f"{r['p99']:>7.2f} "
                f"{cpu_ms:>13.1f} {r['errors']:>7.0f}"
            )
        print(
            f"{'floor':9} {'':>7} {'':>5} {'':>9} {floor['records_s']:>10,.0f} {'':>7} {'':>7} {floor['cpu_us']:>13.1f}"
            "   (confluent-kafka produce_batch() of 100, a delivery callback per record, no HTTP)"
        )
        print("\nevery run (requests/s, p99 ms):")
        for name, per in dict.fromkeys((n, p) for n, p, _ in sweep):
            runs_of = [r for n, p, r in sweep if (n, p) == (name, per)]
            print(
                f"  {name:9} {per:>3}: "
                + ", ".join(f"-c{r['conns']:.0f} {r['rps']:,.0f} ({r['p99']:.1f})" for r in runs_of)
            )
        by = {(n, p): r for n, p, r, _ in rows}
        cpu_by = {(n, p): cpu for n, p, _, cpu in rows}
        keyed_cpu_ms, plain_cpu_ms = cpu_by[("ferry+key", 1)], cpu_by[("ferry", 1)]
        with_key, without_key = by[("ferry+key", 1)], by[("ferry", 1)]
        print(
            f"Idempotency-Key on every request (1 record): {with_key['rps'] / without_key['rps']:.2f}x the requests/s, "
            f"p50 {with_key['p50']:.1f} against {without_key['p50']:.1f} ms"
        )
        print(
            f"\nferry / naive, 1 record per request: {by[('ferry', 1)]['rps'] / by[('naive', 1)]['rps']:.2f}x; "
            f"100 per request: {by[('ferry', 100)]['rps'] / by[('naive', 100)]['rps']:.2f}x"
        )
        _results.save(
            "gateway",
            _results.command_line("python3 -m bench.gateway", ap, a),
            COLUMNS,
            [
                [
                    str(per),
                    f"{by[('naive', per)]['rps'] * per:,.0f}",
                    f"{by[('ferry', per)]['rps'] * per:,.0f}",
                    f"{by[('ferry', per)]['rps'] / by[('naive', per)]['rps']:.2f}×",
                    f"{by[('ferry', per)]['p99']:.1f}",
                ]
                for per in (1, 100)
            ],
            f"wrk -t2 keep-alive, each row the best of -c{'/'.join(map(str, conns))} (Ferry's connections: "
            f"{by[('ferry', 1)]['conns']:.0f} and {by[('ferry', 100)]['conns']:.0f}), every run on a fresh "
            "server and broker; the broker shares the same 2 cores; the gateway's HTTP server alone answers "
            f"{by[('trivial', 1)]['rps']:,.0f} requests/s here "
            f"(aiohttp's low-level server: {by[('aiohttp', 1)]['rps']:,.0f}); confluent-kafka alone "
            "(produce_batch() of 100, a delivery callback per record, no HTTP) produces "
            f"{floor['records_s']:,.0f} records/s at "
            f"{floor['cpu_us']:.1f} µs of CPU per record; one record per request with an Idempotency-Key of its "
            f"own: {with_key['rps']:,.0f} requests/s, p50 {with_key['p50']:.1f} ms "
            f"(without: {without_key['p50']:.1f} ms), {keyed_cpu_ms:.0f} against {plain_cpu_ms:.0f} ms of gateway "
            "CPU per 1,000 requests",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    embedded.tie_children()  # nothing this run starts outlives it
    main()
