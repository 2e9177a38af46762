"""The gateway's HTTP/1.1 server: asyncio protocols + httptools, with read deadlines per connection.

Use case: the gateway answers many small requests, each a few records of JSON. aiohttp's server
spent about 17 µs of CPU on each before the gateway's own code ran (a trivial handler, uvloop);
this server does only what the gateway needs, in about 6 (docs/gateway.md#performance):

- requests of a connection are answered in order (pipelining included); the next one is parsed
  while the current one is handled, and reading pauses while ``MAX_QUEUED`` wait;
- the body is read by the handler (:meth:`Request.read`), after it has looked at the headers: a
  client that sent ``Expect: 100-continue`` is invited to send its body only then, so a refused
  request (a wrong token) is answered before its body travels; any other expectation is a 417;
- a body over ``max_body_bytes`` is a 413 (known from ``Content-Length`` before it arrives, or
  counted as it arrives when chunked); a header block over ``MAX_HEAD_BYTES`` is a 431; bytes
  that are not HTTP/1.1 are a 400. Each of these answers closes the connection;
- a handler that is still running when its client goes away runs to its end (records it is
  writing are acknowledged or failed either way); its answer is dropped.

Slow clients (slowloris) cannot hold the gateway: a connection must deliver a whole request —
headers and body — within ``read_timeout_s`` of opening, or of its previous answer; otherwise it
is closed. States of a connection: armed (its clock runs: waiting for, or reading, a request) →
disarmed (the request is read; the gateway works on it) → armed again once it is answered. A
deadline is a number per connection, checked by one timer per server (a tenth of the timeout, at
most a second): no timer or task per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from email.utils import formatdate
from http import HTTPStatus
from typing import cast
from urllib.parse import unquote

import httptools

from ferry import log
from ferry.digits import ascii_digits
from ferry.gateway.httpmsg import ClientGone, Handler, HttpError, Refusal, Request, Response, plain_refusal

_log = log.get_logger(__name__)

MAX_HEAD_BYTES = 64 * 1024
"""The most a request's line and headers may take; more is a 431."""
MAX_QUEUED = 8
"""Pipelined requests read ahead of the one being handled; reading pauses beyond."""


class Server:
    """A listening server: its connections, their read deadlines, and a graceful close."""

    def __init__(
        self, handler: Handler, *, max_body_bytes: int, read_timeout_s: float, refusal: Refusal = plain_refusal
    ) -> None:
        """``refusal``: the answer to a request the server refuses itself (not HTTP, a head too
        large), to an :class:`HttpError` the handler raised, and to a handler that failed (500)."""
        self.handler = handler
        self.refusal = refusal
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        self.conns: set[Connection] = set()
        self._listener: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._date = (0, "")
        self._all_closed: asyncio.Event | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: any free port); the port listened on."""
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(lambda: Connection(self), host, port, backlog=1024)
        return int(self._listener.sockets[0].getsockname()[1])

    async def close(self, grace_s: float = 60.0) -> None:
        """Stop listening, close idle connections, let requests under way be answered (at most
        ``grace_s``), then close what remains."""
        if self._listener is not None:
            self._listener.close()
        for conn in list(self.conns):
            conn.close_when_idle()
        if self.conns:
            self._all_closed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_closed.wait(), grace_s)
        for conn in list(self.conns):
            conn.abort()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def date(self) -> str:
        """The ``Date`` header's value, formatted once a second."""
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, formatdate(now, usegmt=True))
        return self._date[1]

    # --- read deadlines: one timer while any connection is open ----------------------------------

    def opened(self, conn: Connection) -> None:
        self.conns.add(conn)
        if self._timer is None:
            self._schedule()

    def closed(self, conn: Connection) -> None:
        self.conns.discard(conn)
        if not self.conns and self._all_closed is not None:
            self._all_closed.set()

    def _schedule(self) -> None:
        tick_s = max(0.05, min(1.0, self.read_timeout_s / 10))
        self._timer = asyncio.get_running_loop().call_later(tick_s, self._tick)

    def _tick(self) -> None:
        now = asyncio.get_running_loop().time()
        for conn in [c for c in self.conns if c.deadline is not None and c.deadline <= now]:
            _log.info("gateway.connection.too_slow", read_timeout_ms=int(self.read_timeout_s * 1000))
            conn.abort()
        if self.conns:
            self._schedule()
        else:
            self._timer = None


class Connection(asyncio.Protocol):
    """One client connection: parses requests, hands them to the server's handler one at a time,
    and writes the answers in order."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer = ""  # the client's address, for the requests it sends
        self.parser = httptools.HttpRequestParser(self)
        self.queue: deque[Request] = deque()  # read (or being read), not yet answered
        self.reading: Request | None = None  # the request whose head or body is arriving
        self.head_bytes = 0  # of the head being read: its line and complete headers
        self.unparsed = 0  # bytes fed while a head was incomplete (httptools holds a partial one)
        self.url = b""
        self.deadline: float | None = None
        self.task: asyncio.Task[None] | None = None
        self.read_paused = False
        self.write_paused = False
        self.closing = False  # answer what is queued, then close
        self.refused = False  # the bytes were not HTTP: read no more
        self.draining = False  # the last answer is sent; discard what comes until the client closes

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.arm()
        self.server.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.refused or self.draining:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(HttpError(400, "protocol upgrades are not supported"))
            return
        except httptools.HttpParserError as exc:
            if not self.refused:  # a callback refused already (431)
                self._refuse(HttpError(400, f"not a valid HTTP/1.1 request: {exc}"))
            return
        if self.reading is not None and not self.reading.method:  # a head is incomplete
            self.unparsed += len(data)
            if self.unparsed > 16 * MAX_HEAD_BYTES:  # one endless header, held inside httptools
                self._refuse(_head_too_large())
        else:
            self.unparsed = 0

    def eof_received(self) -> bool | None:
        return None  # close: an answer under way is dropped, its handler runs to its end

    def pause_writing(self) -> None:
        self.write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._resume_reading()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.server.closed(self)
        self.transport = None
        self.deadline = None
        for request in self.queue:
            request.abandon()

    # --- httptools callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.reading = Request(self.send, self.peer)
        self.url = b""
        self.head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.reading is not None
        self._count_head(len(name) + len(value) + 4)
        self.reading.headers.setdefault(name.decode("latin-1").lower(), value.decode("utf-8", "surrogateescape"))

    def _count_head(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > MAX_HEAD_BYTES:
            self._refuse(_head_too_large())
            raise _StopParsing

    def on_headers_complete(self) -> None:
        request = self.reading
        assert request is not None
        request.method = self.parser.get_method().decode("ascii", "replace")
        request.version = self.parser.get_http_version()
        request.keep_alive = self.parser.should_keep_alive()
        request.expect = request.headers.get("expect")
        request.path = _path(
            self.url.split(b"?", 1)[0] if self.url.startswith(b"/") else httptools.parse_url(self.url).path
        )
        length = request.headers.get("content-length")
        if length is not None and ascii_digits(length) and int(length) > self.server.max_body_bytes:
            request.fail(HttpError(413))
        self._enqueue(request)

    def on_body(self, chunk: bytes) -> None:
        if self.reading is not None:
            self.reading.feed(chunk, self.server.max_body_bytes)

    def on_message_complete(self) -> None:
        request = self.reading
        self.reading = None
        if request is not None:
            if self.queue and request is self.queue[0]:
                self.disarm()
            request.finish()

    # --- answering in order --------------------------------------------------------------------

    def _enqueue(self, request: Request) -> None:
        self.queue.append(request)
        if len(self.queue) >= MAX_QUEUED:
            self._pause_reading()
        if self.task is None:
            self.task = self.loop.create_task(self._answer_all())

    async def _answer_all(self) -> None:
        while self.queue and self.transport is not None:
            request = self.queue[0]
            if request.error is not None and request.error.status != 413:  # 413: after the token
                response = self.server.refusal(request, request.error)
            else:
                try:
                    response = await self.server.handler(request)
                except ClientGone:
                    break
                except HttpError as exc:
                    response = self.server.refusal(request, exc)
                except Exception:
                    _log.error("gateway.request.failed", exc_info=True, method=request.method, path=request.path)
                    failed = HttpError(500, "internal error; the gateway's log says more")
                    response = self.server.refusal(request, failed)
            self.queue.popleft()
            last = self.closing or not request.keep_alive or not request.complete or request.error is not None
            self._write(request, response, last)
            if last:
                self._last_answered(request.complete and not self.refused)
                break
            self._resume_reading()
            if self.queue and self.queue[0].complete:
                self.disarm()
            else:
                self.arm()
        self.task = None

    def _write(self, request: Request, response: Response, last: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        status = response.status
        body = response.body
        head = (
            f"HTTP/1.1 {status} {_PHRASES.get(status, '')}\r\nContent-Type: {response.content_type}\r\n"
            f"Content-Length: {len(body)}\r\nDate: {self.server.date()}\r\n"
        )
        if response.headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in response.headers.items())
        if last:
            head += "Connection: close\r\n"
        elif request.version == "1.0":
            head += "Connection: keep-alive\r\n"
        data = (head + "\r\n").encode("latin-1")
        self.transport.write(data if request.method == "HEAD" else data + body)

    def _last_answered(self, read_all: bool) -> None:
        """Close after the last answer. When the client may still be sending (a body refused
        before it arrived), only stop writing: it reads the answer, and what it still sends is
        discarded until it closes or its read deadline passes (closing with unread bytes would
        reset the connection, and the client could lose the answer)."""
        self.closing = True
        transport = self.transport
        if transport is None:
            return
        if read_all or not transport.can_write_eof():
            transport.close()
            return
        self.draining = True
        transport.write_eof()
        self.arm()
        self.read_paused = False
        transport.resume_reading()

    # --- the connection's state ----------------------------------------------------------------

    def send(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def arm(self) -> None:
        self.deadline = self.loop.time() + self.server.read_timeout_s

    def disarm(self) -> None:
        self.deadline = None

    def _pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None:
            self.read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.read_paused and not (self.write_paused or self.refused or len(self.queue) >= MAX_QUEUED):
            self.read_paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    def _refuse(self, error: HttpError) -> None:
        """The bytes cannot be read as a request: answer ``error`` in turn, then close."""
        if self.refused:
            return
        self.refused = True
        self._pause_reading()
        request = self.reading
        self.reading = None
        if request is None or not request.method:  # the head was incomplete: a request of its own
            request = Request(self.send, self.peer)
            request.method = "GET"
            if self.url.startswith(b"/"):  # the path is known once the request line was read
                request.path = _path(self.url.split(b"?", 1)[0])
            request.fail(error)
            self._enqueue(request)
        else:
            request.fail(error)

    def close_when_idle(self) -> None:
        """Close now if no request is being answered, else after the current answer."""
        self.closing = True
        if self.task is None and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


_PHRASES = {s.value: s.phrase for s in HTTPStatus}


class _StopParsing(Exception):
    """Raised in a parser callback to stop httptools (it surfaces as its HttpParserCallbackError)."""


def _path(raw: bytes) -> str:
    """A request target's path, percent-decoded."""
    return unquote(raw.decode("latin-1")) if b"%" in raw else raw.decode("latin-1")


def _head_too_large() -> HttpError:
    return HttpError(431, f"the request's line and headers are over {MAX_HEAD_BYTES:,} bytes")


__all__ = ["MAX_HEAD_BYTES", "Connection", "Server"]
