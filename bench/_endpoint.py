"""A trivial push endpoint for benchmarks (own process): acknowledges, counts distinct records, and
measures record-timestamp → receipt latency from ``ce-time`` (or ``x-ts-ms`` for the baseline).
``/batch`` takes a JSON array of events (CloudEvents batches, or the batched baseline's) and
counts the distinct ``"id"`` values inside, without parsing the rest.

``POST /reset?delay_s=A&delay_max_s=B`` clears the figures and makes every answer wait A s, or a
uniformly random time between A and B s (a slow endpoint). ``GET /stats`` returns the figures,
``GET /receipts`` when each record pushed one at a time arrived, by ``<partition>/<offset>``.

Two servers with the same routes and figures: aiohttp (the default), and with ``--lean`` a
minimal HTTP/1.1 server on an asyncio protocol. The endpoint stands in for the user's service,
which in production runs on other machines; on this machine it shares the cores with the broker
and the consumer under test, and aiohttp spends 0.2-0.3 ms of CPU per request at steady rates.
The lean server spends a fraction of that, so less of the machine goes to the stand-in
(bench/latency.py uses it). It reads what these benchmarks send (Content-Length bodies,
keep-alive, one request at a time per connection) and is no general HTTP server.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import time
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

ID_RE = re.compile(rb'"id":"([^"]*)"')


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted figures (0.0 for none)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class Figures:
    """What the endpoint counted since the last reset, and the delay it answers with."""

    def __init__(self) -> None:
        self.reset(0.0, 0.0)

    def reset(self, delay_s: float, delay_max_s: float) -> None:
        self.seen: set[str | bytes] = set()
        self.lat_ms: list[float] = []
        self.receipts: dict[str, float] = {}  # "<partition>/<offset>" -> receipt, ms since the epoch
        self.span = [0.0, 0.0]  # receipt time of the first and of the latest request that brought a new id
        self.posts = 0
        self.delay_s = delay_s
        self.delay_max_s = delay_max_s

    def delay(self) -> float:
        if self.delay_max_s > self.delay_s:
            return random.uniform(self.delay_s, self.delay_max_s)
        return self.delay_s

    def record(self, cid: str | bytes, ts_ms: str | None, ce_time: str | None) -> None:
        """One pushed record: ``ts_ms`` is the baseline's ``x-ts-ms``, ``ce_time`` Ferry's ``ce-time``."""
        if cid in self.seen:
            return
        now = time.time() * 1000
        if not self.seen:
            self.span[0] = now / 1000
        self.span[1] = now / 1000
        self.seen.add(cid)
        # Ferry's ce-id is <topic>/<partition>/<offset>, the baseline's x-id <partition>/<offset>.
        tail = (cid.decode() if isinstance(cid, bytes) else cid).split("/")[-2:]
        self.receipts["/".join(tail)] = now
        if ts_ms is not None:
            self.lat_ms.append(now - float(ts_ms))
        elif ce_time is not None:
            self.lat_ms.append(now - datetime.fromisoformat(ce_time.replace("Z", "+00:00")).timestamp() * 1000)

    def batch(self, body: bytes) -> None:
        self.posts += 1
        before = len(self.seen)
        self.seen.update(ID_RE.findall(body))
        if len(self.seen) > before:
            now = time.time()
            if not before:
                self.span[0] = now
            self.span[1] = now

    def stats(self) -> dict[str, float]:
        xs = sorted(self.lat_ms)
        quarter = len(self.lat_ms) // 4
        return {
            "count": len(self.seen),
            "p50_ms": percentile(xs, 0.5),
            "p95_ms": percentile(xs, 0.95),
            "p99_ms": percentile(xs, 0.99),
            # In receipt order: a latency that grows through a steady run is a queue building up.
            "p50_first_quarter_ms": percentile(sorted(self.lat_ms[:quarter]), 0.5),
            "p50_last_quarter_ms": percentile(sorted(self.lat_ms[-quarter:]), 0.5) if quarter else 0.0,
            "first_at": self.span[0],
            "last_at": self.span[1],
            "posts": self.posts,
        }


figures = Figures()


def run_aiohttp(port: int) -> None:
    from aiohttp import web

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        h = request.headers
        figures.record(h.get("ce-id") or h.get("x-id") or "", h.get("x-ts-ms"), h.get("ce-time"))
        if delay := figures.delay():
            await asyncio.sleep(delay)
        return web.Response(status=200)

    async def batch(request: web.Request) -> web.Response:
        figures.batch(await request.read())
        if figures.delay_s:
            await asyncio.sleep(figures.delay_s)
        return web.Response(status=200)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(figures.stats())

    async def receipts(_: web.Request) -> web.Response:
        return web.json_response(figures.receipts)

    async def reset(request: web.Request) -> web.Response:
        figures.reset(float(request.query.get("delay_s", "0")), float(request.query.get("delay_max_s", "0")))
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/batch", batch)
    app.router.add_get("/stats", stats)
    app.router.add_get("/receipts", receipts)
    app.router.add_post("/reset", reset)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
MAX_HEAD_BYTES = 64 * 1024


def answer_json(doc: object) -> bytes:
    body = json.dumps(doc).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class Lean(asyncio.Protocol):
    """One connection of the lean server: requests are parsed as their bytes arrive and answered
    in order; a request it cannot read closes the connection with a 400."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.buf:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD_BYTES:
                    self.fail()
                return
            lines = self.buf[:end].split(b"\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get(b"content-length", b"0"))
            except ValueError:
                return self.fail()
            start = end + 4
            if len(self.buf) < start + length:
                return  # the body is still on its way
            body, self.buf = self.buf[start : start + length], self.buf[start + length :]
            self.serve(lines[0], headers, body)

    def serve(self, request_line: bytes, headers: dict[bytes, bytes], body: bytes) -> None:
        method, _, rest = request_line.partition(b" ")
        target = rest.rpartition(b" ")[0].decode("latin-1")
        path = urlsplit(target).path
        if method == b"POST" and path == "/hook":
            cid = headers.get(b"ce-id") or headers.get(b"x-id", b"")
            ts, ce_time = headers.get(b"x-ts-ms"), headers.get(b"ce-time")
            figures.record(cid, ts.decode() if ts else None, ce_time.decode() if ce_time else None)
            self.reply(OK, figures.delay())
        elif method == b"POST" and path == "/batch":
            figures.batch(body)
            self.reply(OK, figures.delay_s)
        elif method == b"GET" and path == "/stats":
            self.reply(answer_json(figures.stats()), 0.0)
        elif method == b"GET" and path == "/receipts":
            self.reply(answer_json(figures.receipts), 0.0)
        elif method == b"POST" and path == "/reset":
            q = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
            figures.reset(float(q.get("delay_s", "0")), float(q.get("delay_max_s", "0")))
            self.reply(answer_json({}), 0.0)
        else:
            self.t.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    def reply(self, answer: bytes, delay_s: float) -> None:
        if delay_s:
            asyncio.get_running_loop().call_later(delay_s, self.write_open, answer)
        else:
            self.t.write(answer)

    def write_open(self, answer: bytes) -> None:
        if not self.t.is_closing():
            self.t.write(answer)

    def fail(self) -> None:
        self.t.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        self.t.close()
        self.buf = b""


def run_lean(port: int) -> None:
    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Lean, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    (run_lean if "--lean" in sys.argv[2:] else run_aiohttp)(int(sys.argv[1]))
