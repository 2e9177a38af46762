"""An HTTP endpoint recorder with scriptable answers, running in its own thread and event loop,
so sync tests, async tests and subprocess workers can all push to it.

    with EndpointRecorder() as ep:
        ep.script = lambda req: Reply(503) if req.attempt == 1 else Reply(200)
        ...  # push to ep.url
        ep.wait_for(lambda reqs: len(reqs) >= 100, timeout_s=30)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() on receipt
    status: int | None = None  # what the endpoint answered; None: no answer (connection dropped)
    pusher: str | None = None  # who sent it, when the recorder was given an ``identify`` function

    @property
    def ce_id(self) -> str:
        return self.headers.get("ce-id", "")

    @property
    def attempt(self) -> int:
        return int(self.headers.get("ce-ferryattempt", "1"))

    @property
    def key(self) -> str | None:
        return self.headers.get("ce-partitionkey")

    @property
    def offset(self) -> int:
        return int(self.headers.get("ce-kafkaoffset", "-1"))

    @property
    def partition(self) -> int:
        return int(self.headers.get("ce-kafkapartition", "-1"))


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0
    close: bool = False  # drop the connection without an answer


class EndpointRecorder:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.received: list[Received] = []
        self.script: Callable[[Received], Reply] = lambda r: Reply(200)
        # Optional: the client's port → who pushed (e.g. a worker id), asked once per connection.
        self.identify: Callable[[int], str | None] | None = None
        self._peers: dict[int, tuple[object, str | None]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        rec = Received(request.path, {k.lower(): v for k, v in request.headers.items()}, body, time.time())
        rec.pusher = self._pusher(request)
        with self._lock:
            self.received.append(rec)
        reply = self.script(rec)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        transport = request.transport
        if reply.close or transport is None or transport.is_closing():
            if transport is not None:
                transport.close()
            return web.Response(status=200)  # never sent: rec.status stays None
        rec.status = reply.status
        return web.Response(status=reply.status, headers=reply.headers, body=reply.body)

    def _pusher(self, request: web.Request) -> str | None:
        transport = request.transport
        if self.identify is None or transport is None:
            return None
        peer = transport.get_extra_info("peername")
        if not peer:
            return None
        port = int(peer[1])
        known = self._peers.get(port)
        if known is None or known[0] is not transport:
            known = (transport, self.identify(port))
            self._peers[port] = known
        return known[1]

    def start(self) -> EndpointRecorder:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, self.host, self.port or 0, backlog=1024)
            loop.run_until_complete(site.start())
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, name="endpoint-recorder", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("endpoint recorder did not start in 10 s")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> EndpointRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def wait_for(
        self, cond: Callable[[list[Received]], bool], timeout_s: float = 30.0, what: str = ""
    ) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while True:
            snap = self.snapshot()
            if cond(snap):
                return snap
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"endpoint: timed out after {timeout_s}s waiting for {what or cond}; got {len(snap)} requests"
                )
            time.sleep(0.05)
