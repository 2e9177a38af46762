"""Read deadlines per connection, and the low-level HTTP server that keeps them.

Use case: a slow client (slowloris) must not hold the gateway. A connection must deliver a whole
request — headers and body — within ``read_timeout_s`` of opening, or of its previous answer;
otherwise it is closed.

States of a connection: armed (its clock runs: waiting for, or reading, a request) → disarmed (the
request is read; the gateway works on it) → armed again once it is answered. A deadline is a
number per connection, checked by one timer per server (a tenth of the timeout, at most a
second): no timer or task per request.

:class:`GuardedServer` is aiohttp's low-level server (no ``web.Application``: the gateway routes
its few paths itself, see :mod:`ferry.gateway.app`) making guarded connections, with the body
limit on every request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import HttpVersion11
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler


class ReadClock:
    """The read deadlines of a server's connections, checked by one timer a tick."""

    def __init__(self) -> None:
        self.conns: set[Guarded] = set()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, conn: Guarded) -> None:
        self.conns.add(conn)
        if self._timer is None:
            self._schedule()

    def discard(self, conn: Guarded) -> None:
        self.conns.discard(conn)

    def _schedule(self) -> None:
        tick_s = max(0.05, min(1.0, Guarded.read_timeout_s / 10))
        self._timer = asyncio.get_running_loop().call_later(tick_s, self._tick)

    def _tick(self) -> None:
        now = asyncio.get_running_loop().time()
        for conn in [c for c in self.conns if c.deadline is not None and c.deadline <= now]:
            conn.too_slow()
        if self.conns:
            self._schedule()
        else:
            self._timer = None


class Guarded(RequestHandler):
    """A connection that must bring each request's headers and body within ``read_timeout_s``."""

    read_timeout_s = 10.0
    clock: ReadClock

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.deadline: float | None = None
        self.arm()
        self.clock.add(self)

    def arm(self) -> None:
        self.deadline = asyncio.get_running_loop().time() + self.read_timeout_s

    def disarm(self) -> None:
        self.deadline = None

    def too_slow(self) -> None:
        self.deadline = None
        self.force_close()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.clock.discard(self)
        super().connection_lost(exc)


class GuardedServer(web.Server):
    """aiohttp's low-level server: guarded connections, requests with ``max_body_bytes``."""

    def __init__(self, handler: Any, *, max_body_bytes: int, **kwargs: Any) -> None:
        super().__init__(handler, request_factory=self._request, **kwargs)
        self.clock = ReadClock()
        self.max_body_bytes = max_body_bytes

    def _request(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        return web.BaseRequest(
            message, payload, protocol, writer, task, self._loop, client_max_size=self.max_body_bytes
        )

    def __call__(self) -> RequestHandler:
        conn = Guarded(self, loop=self._loop, **self._kwargs)
        conn.clock = self.clock
        return conn


async def read_request(request: web.BaseRequest) -> None:
    """Read the whole request under its connection's clock, then stop the clock (the caller
    restarts it with :func:`answered` once the request is answered). A client that sent
    ``Expect: 100-continue`` is told to send its body now (the caller has checked the headers:
    a refused request is answered before its body is sent); any other expectation is a 417."""
    expect = request.headers.get("Expect")
    if expect is not None and request.version == HttpVersion11:
        if expect.lower() != "100-continue":
            raise web.HTTPExpectationFailed(reason=f"Expect: {expect[:40]} is not supported (only 100-continue)")
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer proper has not started
    if request.body_exists:
        await request.read()  # a client that stalls here is cut off by the clock
    protocol = request.protocol
    if isinstance(protocol, Guarded):
        protocol.disarm()


def answered(request: web.BaseRequest) -> None:
    """Start the connection's clock again: the next request must come within the timeout."""
    protocol = request.protocol
    if isinstance(protocol, Guarded):
        protocol.arm()
