"""HTTP client candidates for the push path, side by side: small POSTs to one trivial endpoint.

Run: python3 bench/http_clients.py [--requests 20000] [--seconds 10] [--in-flight 32,64,128]

Every candidate runs in its own process (``--candidate NAME``) against the same endpoint
(bench/_endpoint.py, aiohttp + uvloop, its own process) with a fixed number of requests in
flight, a bounded count and a bounded time. Each request carries the CloudEvents headers a Ferry
push carries (12 headers) and a 100 B body. Printed per candidate: requests/s, the client
process's CPU time per request (user + system, what the client itself costs; the endpoint shares
the 2 cores, so req/s alone partly measures the endpoint) and the ratio to aiohttp's defaults.

Candidates: aiohttp default, aiohttp tuned (+ uvloop, no cookie jar, skip auto headers, one
connector limit), pycurl's multi interface, pyreqwest (Rust reqwest/hyper), httpx (reference,
small count) and Ferry's worker/http1.py Http1Pool with uvloop.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BODY = b"x" * 100
CANDIDATES = ["aiohttp", "aiohttp-tuned", "pycurl", "pyreqwest", "httpx", "ferry-http1"]


def ce_headers(i: int) -> dict[str, str]:
    return {
        "Content-Type": "application/octet-stream",
        "ce-specversion": "1.0",
        "ce-id": f"bench/0/{i}",
        "ce-source": "/ferry/bench/clients",
        "ce-type": "dev.ferry.kafka.record",
        "ce-time": "2026-01-01T00:00:00.000Z",
        "ce-kafkatopic": "bench",
        "ce-kafkapartition": "0",
        "ce-kafkaoffset": str(i),
        "ce-partitionkey": f"k{i % 200}",
        "ce-ferryattempt": "1",
    }


# --- the candidates (each runs in its own process) ------------------------------------------


async def drive(post: Callable[[int], Awaitable[int]], n: int, in_flight: int, seconds: float) -> int:
    """Keep ``in_flight`` requests going until ``n`` are done or ``seconds`` passed; returns how many."""
    next_i = 0
    done = 0
    deadline = time.monotonic() + seconds

    async def lane() -> None:
        nonlocal next_i, done
        while next_i < n and time.monotonic() < deadline:
            i = next_i
            next_i += 1
            status = await post(i)
            if status != 200:
                raise RuntimeError(f"request {i}: status {status}")
            done += 1

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    return done


async def run_aiohttp(url: str, n: int, in_flight: int, seconds: float, tuned: bool) -> int:
    import aiohttp

    if tuned:
        connector = aiohttp.TCPConnector(
            limit=in_flight, limit_per_host=0, ttl_dns_cache=None, enable_cleanup_closed=False
        )
        session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
            auto_decompress=False,
            raise_for_status=False,
        )
    else:
        session = aiohttp.ClientSession()

    async def post(i: int) -> int:
        async with session.post(url, data=BODY, headers=ce_headers(i)) as r:
            await r.read()
            return r.status

    try:
        return await drive(post, n, in_flight, seconds)
    finally:
        await session.close()


async def run_httpx(url: str, n: int, in_flight: int, seconds: float) -> int:
    import httpx

    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(limits=limits) as client:

        async def post(i: int) -> int:
            r = await client.post(url, content=BODY, headers=ce_headers(i))
            return r.status_code

        return await drive(post, n, in_flight, seconds)


async def run_pyreqwest(url: str, n: int, in_flight: int, seconds: float) -> int:
    from pyreqwest.client import ClientBuilder

    client = ClientBuilder().max_connections(in_flight).http1_only().build()
    async with client:

        async def post(i: int) -> int:
            r = await client.post(url).headers(ce_headers(i)).body_bytes(BODY).build().send()
            await r.bytes()
            return int(r.status)

        return await drive(post, n, in_flight, seconds)


async def run_ferry(url: str, n: int, in_flight: int, seconds: float) -> int:
    from ferry.netguard import EndpointPolicy
    from ferry.worker.http1 import Http1Pool

    pool = Http1Pool(EndpointPolicy(), max_per_origin=in_flight)

    async def post(i: int) -> int:
        return (await pool.post(url, ce_headers(i), BODY, 10.0)).status

    try:
        return await drive(post, n, in_flight, seconds)
    finally:
        pool.close()


def run_pycurl(url: str, n: int, in_flight: int, seconds: float) -> int:
    """libcurl's multi interface: ``in_flight`` reused easy handles (keep-alive), one select loop."""
    import pycurl

    multi = pycurl.CurlMulti()
    multi.setopt(pycurl.M_MAX_HOST_CONNECTIONS, in_flight)
    sink = bytearray()
    free = []
    for _ in range(in_flight):
        c = pycurl.Curl()
        c.setopt(pycurl.URL, url)
        c.setopt(pycurl.POST, 1)
        c.setopt(pycurl.WRITEFUNCTION, sink.extend)
        c.setopt(pycurl.NOSIGNAL, 1)
        c.setopt(pycurl.TIMEOUT_MS, 10_000)
        free.append(c)
    next_i = done = 0
    deadline = time.monotonic() + seconds

    def start(c: pycurl.Curl, i: int) -> None:
        hs = [f"{k}: {v}" for k, v in ce_headers(i).items()] + ["Expect:", "Accept:"]
        c.setopt(pycurl.HTTPHEADER, hs)
        c.setopt(pycurl.POSTFIELDS, BODY)
        multi.add_handle(c)

    active = 0
    while True:
        while free and next_i < n and time.monotonic() < deadline:
            start(free.pop(), next_i)
            next_i += 1
            active += 1
        if not active:
            break
        while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
            pass
        _, ok, failed = multi.info_read()
        for c in ok:
            multi.remove_handle(c)
            if c.getinfo(pycurl.RESPONSE_CODE) != 200:
                raise RuntimeError(f"status {c.getinfo(pycurl.RESPONSE_CODE)}")
            done += 1
            active -= 1
            free.append(c)
        if failed:
            raise RuntimeError(f"pycurl: {failed[0][2]}")
        sink.clear()
        if not ok:
            multi.select(0.01)
    return done


def candidate(name: str, url: str, n: int, in_flight: int, seconds: float) -> dict[str, float]:
    if name in ("aiohttp-tuned", "ferry-http1"):
        import uvloop

        uvloop.install()
    # Import before the clock starts: start-up is not what is compared.
    modules = {"aiohttp": "aiohttp", "aiohttp-tuned": "aiohttp", "httpx": "httpx", "pycurl": "pycurl"}
    modules |= {"pyreqwest": "pyreqwest.client", "ferry-http1": "ferry.worker.http1"}
    importlib.import_module(modules[name])
    t0, c0 = time.monotonic(), os.times()
    if name == "pycurl":
        done = run_pycurl(url, n, in_flight, seconds)
    else:
        runs: dict[str, Callable[[], Coroutine[Any, Any, int]]] = {
            "aiohttp": lambda: run_aiohttp(url, n, in_flight, seconds, tuned=False),
            "aiohttp-tuned": lambda: run_aiohttp(url, n, in_flight, seconds, tuned=True),
            "httpx": lambda: run_httpx(url, n, in_flight, seconds),
            "pyreqwest": lambda: run_pyreqwest(url, n, in_flight, seconds),
            "ferry-http1": lambda: run_ferry(url, n, in_flight, seconds),
        }
        done = asyncio.run(runs[name]())
    t1, c1 = time.monotonic(), os.times()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return {"done": done, "seconds": t1 - t0, "cpu_s": cpu}


# --- the comparison -------------------------------------------------------------------------


def measure(name: str, url: str, n: int, in_flight: int, seconds: float) -> dict[str, float] | str:
    cmd = [sys.executable, __file__, "--candidate", name, "--url", url, "--requests", str(n)]
    cmd += ["--in-flight", str(in_flight), "--seconds", str(seconds)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60, check=False)
    except subprocess.TimeoutExpired:
        return "timed out"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return f"failed: {last[:80]}"
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=8.0, help="time bound per candidate and in-flight count")
    ap.add_argument("--in-flight", default="32,64,128")
    ap.add_argument("--httpx-requests", type=int, default=3_000, help="httpx is slow; a smaller count suffices")
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--candidate", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.candidate:
        print(json.dumps(candidate(a.candidate, a.url, a.requests, int(a.in_flight), a.seconds)))
        return

    from bench._harness import http
    from ferry.devstack import embedded

    embedded.tie_children()  # the endpoint ends with the bench, however it ends
    tmp = Path(tempfile.mkdtemp(prefix="ferry-bench-clients-"))
    port = embedded.free_port()
    endpoint = embedded.ServiceProcess(
        "endpoint", [sys.executable, str(Path(__file__).parent / "_endpoint.py"), str(port)], port, tmp / "ep.log"
    )
    endpoint.start().wait_ready(30)
    ep = f"http://127.0.0.1:{port}"
    names = a.candidates.split(",")
    rows: list[tuple[int, str, dict[str, float] | str]] = []
    try:
        for in_flight in (int(x) for x in a.in_flight.split(",")):
            for name in names:
                http("POST", f"{ep}/reset")
                n = a.httpx_requests if name == "httpx" else a.requests
                r = measure(name, f"{ep}/hook", n, in_flight, a.seconds)
                rows.append((in_flight, name, r))
                shown = r if isinstance(r, str) else f"{r['done'] / r['seconds']:,.0f} req/s"
                print(f"  in flight {in_flight:>3}  {name:14} {shown}", flush=True)
    finally:
        endpoint.stop()
    shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{'in flight':>9} {'client':14} {'requests':>9} {'req/s':>8} {'CPU us/req':>10} {'vs aiohttp':>10}")
    for in_flight in sorted({r[0] for r in rows}):
        base = next((r for f, nm, r in rows if f == in_flight and nm == "aiohttp" and not isinstance(r, str)), None)
        for f, name, r in rows:
            if f != in_flight:
                continue
            if isinstance(r, str):
                print(f"{f:>9} {name:14} {r}")
                continue
            rate = r["done"] / r["seconds"]
            ratio = f"{rate / (base['done'] / base['seconds']):.2f}x" if isinstance(base, dict) else "-"
            us = r["cpu_s"] / max(1, r["done"]) * 1e6
            print(f"{f:>9} {name:14} {int(r['done']):>9,} {rate:>8,.0f} {us:>10.0f} {ratio:>10}")
    print("endpoint: bench/_endpoint.py (aiohttp + uvloop) in its own process, sharing the machine's cores")


if __name__ == "__main__":
    main()
