"""A trivial push endpoint for benchmarks (own process): acknowledges, counts distinct records, and
measures record-timestamp → receipt latency from ``ce-time`` (or ``x-ts-ms`` for the baseline).
``/batch`` takes a JSON array of events (CloudEvents batches, or the batched baseline's) and
counts the distinct ``"id"`` values inside, without parsing the rest.

``POST /reset?delay_s=A&delay_max_s=B`` clears the figures and makes every answer wait A s, or a
uniformly random time between A and B s (a slow endpoint)."""

from __future__ import annotations

import asyncio
import random
import re
import sys
import time
from datetime import datetime

from aiohttp import web

seen: set[str | bytes] = set()
ID_RE = re.compile(rb'"id":"([^"]*)"')
lat_ms: list[float] = []
delay_s = 0.0
delay_max_s = 0.0
span = [0.0, 0.0]  # receipt time of the first and of the latest request (or batch) that brought a new id
posts = [0]


async def hook(request: web.Request) -> web.Response:
    await request.read()
    now = time.time() * 1000
    cid = request.headers.get("ce-id") or request.headers.get("x-id", "")
    if cid not in seen:
        if not seen:
            span[0] = now / 1000
        span[1] = now / 1000
        seen.add(cid)
        ts = request.headers.get("x-ts-ms")
        if ts is not None:
            lat_ms.append(now - float(ts))
        elif "ce-time" in request.headers:
            t = datetime.fromisoformat(request.headers["ce-time"].replace("Z", "+00:00")).timestamp() * 1000
            lat_ms.append(now - t)
    if delay_max_s > delay_s:
        await asyncio.sleep(random.uniform(delay_s, delay_max_s))
    elif delay_s:
        await asyncio.sleep(delay_s)
    return web.Response(status=200)


async def batch(request: web.Request) -> web.Response:
    posts[0] += 1
    before = len(seen)
    seen.update(ID_RE.findall(await request.read()))
    if len(seen) > before:
        now = time.time()
        if not before:
            span[0] = now
        span[1] = now
    if delay_s:
        await asyncio.sleep(delay_s)
    return web.Response(status=200)


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted figures (0.0 for none)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def stats(_: web.Request) -> web.Response:
    xs = sorted(lat_ms)
    quarter = len(lat_ms) // 4
    return web.json_response(
        {
            "count": len(seen),
            "p50_ms": percentile(xs, 0.5),
            "p95_ms": percentile(xs, 0.95),
            "p99_ms": percentile(xs, 0.99),
            # In receipt order: a latency that grows through a steady run is a queue building up.
            "p50_first_quarter_ms": percentile(sorted(lat_ms[:quarter]), 0.5),
            "p50_last_quarter_ms": percentile(sorted(lat_ms[-quarter:]), 0.5) if quarter else 0.0,
            "first_at": span[0],
            "last_at": span[1],
            "posts": posts[0],
        }
    )


async def reset(request: web.Request) -> web.Response:
    global delay_s, delay_max_s
    seen.clear()
    lat_ms.clear()
    span[:] = [0.0, 0.0]
    posts[0] = 0
    delay_s = float(request.query.get("delay_s", "0"))
    delay_max_s = float(request.query.get("delay_max_s", "0"))
    return web.json_response({})


def main() -> None:
    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/batch", batch)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    main()
