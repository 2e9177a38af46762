"""An endpoint of limited capacity, for bench/adaptive.py (own process).

It serves ``C`` requests at once, each for a fixed service time, queues up to ``--queue`` more in
arrival order, and answers 503 at once when its queue is full: a service with a thread pool and
a bounded backlog. ``C`` follows a schedule of phases, so the bench can change the endpoint's
capacity mid-run.

    python3 bench/_capacity_endpoint.py PORT [--service-ms 20] [--queue 128]

``POST /start`` with ``{"phases": [[C, seconds], ...]}`` clears the figures; the phase clock
starts at the first request after it (``t0``, on the machine's monotonic clock, which all
processes share). ``GET /figures`` (``?rows=0``: only ``t0``) returns, per request, what the bench needs
to cut the run into phases: when it arrived and was answered (seconds since the clock started),
its answer (200 or 503), whether its client had already gone (a timeout at the worker), the
record's ``ce-id``, and whether it waited in the queue for a slot (a request served without
waiting shows the endpoint's unloaded latency). A request is *processed* once it was served its
service time, whether or not its client still waited; a record processed twice is a duplicate.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time

from aiohttp import web


class Capacity:
    """The schedule, the slots in use and the waiting queue."""

    def __init__(self, service_s: float, queue: int) -> None:
        self.service_s = service_s
        self.queue_max = queue
        self.generation = 0
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self.start([[1, 1.0]])

    def start(self, phases: list[list[float]]) -> None:
        """A new run: requests of the previous one still queued are dropped and those still in
        service no longer count against the new run's slots."""
        for fut in self.waiting:
            fut.cancel()
        self.generation += 1
        self.phases = [(int(c), float(s)) for c, s in phases]
        self.t0: float | None = None
        self.busy = 0
        self.waiting = collections.deque()
        self.rows: list[list[object]] = []

    def clock(self) -> float:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
            loop = asyncio.get_running_loop()
            at = 0.0
            for _, seconds in self.phases:  # capacity grows at a boundary: let the queue in
                at += seconds
                loop.call_later(at, self.dispatch)
        return now - self.t0

    def capacity(self, t: float) -> int:
        at = 0.0
        for c, seconds in self.phases:
            at += seconds
            if t < at:
                return c
        return self.phases[-1][0]

    def dispatch(self) -> None:
        cap = self.capacity(self.clock())
        while self.waiting and self.busy < cap:
            fut = self.waiting.popleft()
            if not fut.done():
                self.busy += 1
                fut.set_result(None)

    async def handle(self, request: web.Request) -> web.Response:
        generation = self.generation
        arrived = self.clock()
        cid = request.headers.get("ce-id", "")
        await request.read()
        waited = False
        if self.busy < self.capacity(arrived) and not self.waiting:
            self.busy += 1
        elif len(self.waiting) >= self.queue_max:
            self.rows.append([arrived, arrived, 503, False, cid, False])
            return web.Response(status=503)
        else:
            waited = True
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiting.append(fut)
            await fut  # a slot was handed over: busy already counts it
        try:
            await asyncio.sleep(self.service_s)
        finally:
            if generation == self.generation:
                self.busy -= 1
                self.dispatch()
        if generation != self.generation:
            return web.Response(status=200)
        gone = request.transport is None or request.transport.is_closing()
        self.rows.append([arrived, self.clock(), 200, gone, cid, waited])
        return web.Response(status=200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--service-ms", type=float, default=20.0)
    ap.add_argument("--queue", type=int, default=128)
    a = ap.parse_args()
    cap = Capacity(a.service_ms / 1000, a.queue)

    async def start(request: web.Request) -> web.Response:
        cap.start((await request.json())["phases"])
        return web.json_response({"ok": True})

    async def figures(request: web.Request) -> web.Response:
        body = {"t0": cap.t0, "rows": cap.rows if request.query.get("rows") != "0" else []}
        return web.Response(body=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_post("/hook", cap.handle)
    app.router.add_post("/start", start)
    app.router.add_get("/figures", figures)
    web.run_app(app, host="127.0.0.1", port=a.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
