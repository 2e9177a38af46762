"""A lean HTTP/1.1 client for the push path: keep-alive pools on asyncio protocols + httptools.

Why not aiohttp here: the push path sends one small POST per record, and aiohttp spends most of
a worker's CPU building and tracking each request (measured in bench/delivery.py: aiohttp's
request machinery was ~60 % of the worker's time). This client does only what pushing needs:

- one pool of keep-alive connections per origin, at most ``max_per_origin`` open;
- the host is resolved by the client itself, every address is checked against the SSRF policy
  (:class:`ferry.netguard.EndpointPolicy`) and the connection goes to a checked address; answers
  are cached ``dns_ttl_s``, so a changed DNS answer is checked again within seconds;
- a request resolves as soon as the status line and headers arrived: an endpoint that never
  finishes its body cannot hold an acknowledged push hostage (that connection is dropped
  instead of reused); a batch push (``read_body`` > 0) waits for the whole answer body instead,
  keeping at most ``read_body`` bytes of it (``Answer.truncated`` says when more came); 1xx
  interim answers are skipped; redirects are returned, never followed;
- at most ``MAX_HEAD_BYTES`` may arrive before the final status and headers (1xx answers
  included), so a huge or endless header block costs bounded memory and fails fast;
- a kept-alive connection that turns out closed before any answer byte (the endpoint closed it
  while idle) is retried once on a fresh connection, so an idle-close race costs no attempt;
- any parse error, reset or timeout closes the connection and raises :class:`PushError`; a
  connection dropped with request bytes still unsent (the endpoint answered early and stopped
  reading) is aborted, not flushed, so it cannot linger.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

import httptools

from ferry.errors import FerryError
from ferry.netguard import EndpointPolicy

MAX_HEAD_BYTES = 64 * 1024


class PushError(FerryError):
    """No HTTP answer: connection refused or reset, garbage answer, timeout."""


class _NoAnswerInTime(PushError):
    """The request's deadline passed: never retried on a fresh connection within the same push."""


def _expire(waiter: asyncio.Future[Answer], timeout_s: float) -> None:
    if not waiter.done():
        waiter.set_exception(_NoAnswerInTime(f"no answer within {int(timeout_s * 1000)} ms"))


class _Deadlines:
    """Answer deadlines of the requests under way, checked by one timer every ``SWEEP_S`` while
    any is pending: a timer per request (``call_at`` + ``cancel``) was ~7 % of the single-record
    path (bench/worker_profile.py). An answer that does not come fails at most ``SWEEP_S`` late."""

    SWEEP_S = 0.05

    def __init__(self) -> None:
        self._due: dict[asyncio.Future[Answer], tuple[float, float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, waiter: asyncio.Future[Answer], deadline: float, timeout_s: float) -> None:
        self._due[waiter] = (deadline, timeout_s)
        loop = waiter.get_loop()
        if self._timer is None or self._loop is not loop:  # a pool used again under a new loop
            self._loop = loop
            self._timer = loop.call_later(self.SWEEP_S, self._sweep)

    def discard(self, waiter: asyncio.Future[Answer]) -> None:
        self._due.pop(waiter, None)

    def _sweep(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for waiter, (deadline, timeout_s) in list(self._due.items()):
            if deadline <= now:
                del self._due[waiter]
                _expire(waiter, timeout_s)
        if self._due:
            self._timer = loop.call_later(self.SWEEP_S, self._sweep)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Answer(NamedTuple):
    """One answer (a tuple: one is built per request, and a frozen dataclass's ``__init__`` was
    ~1 % of the single-record path)."""

    status: int
    retry_after: str | None
    body: bytes = b""
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed endpoint URL."""

    scheme: str
    host: str
    port: int
    path: bytes
    host_header: bytes

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (parts.scheme, port) in (("http", 80), ("https", 443))
        netloc = f"[{host}]" if ":" in host else host
        host_header = netloc if default else f"{netloc}:{port}"
        return cls(parts.scheme, host, port, path.encode(), host_header.encode("idna"))


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
        self.retry_after: str | None = None
        self.read_body = 0
        self.status = 0  # of the answer being read, once its headers are in
        self.body: list[bytes] = []
        self.body_size = 0
        self.complete = True
        self.keep_alive = True
        self.closed = False
        self.idle_since = 0.0
        self.head_bytes = 0  # bytes received while the current request still waits for its answer
        self.answered_bytes = False  # any byte received since the current request was sent

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.complete and (self.waiter is None or self.waiter.done()):
            self.close()  # bytes after a complete answer, or on an idle connection: never reuse it
            return
        self.answered_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(PushError(f"invalid HTTP answer: {exc}"))
            self.close()
            return
        except httptools.HttpParserUpgrade:
            self._fail(PushError("endpoint answered with a protocol upgrade"))
            self.close()
            return
        if not self.status and self.waiter is not None and not self.waiter.done():
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._fail(PushError(f"answer headers (1xx answers included) exceed {MAX_HEAD_BYTES} bytes"))
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.read_body and exc is None and self.status and self.waiter is not None and not self.waiter.done():
            # A body delimited by the connection's end (no Content-Length): the close completes it.
            body = b"".join(self.body)
            self.waiter.set_result(Answer(self.status, self.retry_after, body, self.body_size > len(body)))
        self._fail(PushError(f"connection closed by the endpoint{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.retry_after = None
        self.status = 0
        self.complete = False
        self.body = []
        self.body_size = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self.retry_after = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            return  # interim answer; the real one follows
        self.keep_alive = self.parser.should_keep_alive()
        self.status = status
        if self.read_body:
            return  # resolved in on_message_complete, with the body
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(Answer(status, self.retry_after))

    def on_message_complete(self) -> None:
        if 100 <= self.parser.get_status_code() < 200:
            return
        self.complete = True
        if self.read_body and self.waiter is not None and not self.waiter.done():
            status = self.parser.get_status_code()
            body = b"".join(self.body)
            self.waiter.set_result(Answer(status, self.retry_after, body, self.body_size > len(body)))

    def on_body(self, data: bytes) -> None:
        if self.read_body:
            keep = self.read_body - min(self.body_size, self.read_body)
            if keep > 0:
                self.body.append(data[:keep])
            self.body_size += len(data)

    # use
    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    def send(self, data: bytes, read_body: int = 0) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self.read_body = read_body
        self.waiter = asyncio.get_running_loop().create_future()
        self.complete = False
        self.head_bytes = 0
        self.answered_bytes = False
        self.transport.write(data)
        return self.waiter

    def reusable(self) -> bool:
        return not self.closed and self.complete and self.keep_alive

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            if self.transport.get_write_buffer_size():
                self.transport.abort()  # unsent request bytes: do not wait for a peer that stopped reading
            else:
                self.transport.close()


def encode_header_lines(headers: dict[str, str]) -> bytes:
    """Request header lines, each as ``\\r\\nName: value`` (names Latin-1, values UTF-8)."""
    return b"".join(b"\r\n" + k.encode("latin-1") + b": " + v.encode("utf-8") for k, v in headers.items())


class _Origin:
    def __init__(self, limit: int) -> None:
        self.idle: deque[_Conn] = deque()
        self.slots = asyncio.Semaphore(limit)
        self.addresses: list[str] = []
        self.resolved_at = -1e9


class Http1Pool:
    def __init__(
        self, policy: EndpointPolicy, max_per_origin: int = 256, dns_ttl_s: float = 10.0, idle_s: float = 30.0
    ):
        self._policy = policy
        self._limit = max_per_origin
        self._dns_ttl_s = dns_ttl_s
        self._idle_s = idle_s
        self._origins: dict[tuple[str, str, int], _Origin] = {}
        self._targets: dict[str, Target] = {}
        self._ssl: ssl.SSLContext | None = None
        self._rr = 0
        self._deadlines = _Deadlines()

    def target(self, url: str) -> Target:
        t = self._targets.get(url)
        if t is None:
            t = self._targets[url] = Target.parse(url)
        return t

    async def post(
        self, url: str, headers: dict[str, str], body: bytes, timeout_s: float, read_body: int = 0
    ) -> Answer:
        return await self.post_lines(url, encode_header_lines(headers), body, timeout_s, read_body)

    async def post_lines(self, url: str, lines: bytes, body: bytes, timeout_s: float, read_body: int = 0) -> Answer:
        """:meth:`post` with the headers already encoded by :func:`encode_header_lines` (the push
        path keeps the constant ones of a partition encoded)."""
        t = self.target(url)
        origin = self._origins.get((t.scheme, t.host, t.port))
        if origin is None:
            origin = self._origins[(t.scheme, t.host, t.port)] = _Origin(self._limit)
        request = b"".join(
            (b"POST ", t.path, b" HTTP/1.1\r\nHost: ", t.host_header, b"\r\nContent-Length: ", b"%d" % len(body))
        )
        request += lines + b"\r\n\r\n" + body
        async with origin.slots:
            # The endpoint's time starts once a connection slot is ours, as before any answer wait.
            deadline = asyncio.get_running_loop().time() + timeout_s
            conn = self._idle(origin)
            if conn is not None:
                try:
                    return self._checkin(
                        origin, conn, await self._answer(conn, request, read_body, deadline, timeout_s)
                    )
                except _NoAnswerInTime:
                    conn.close()
                    raise
                except PushError:
                    conn.close()
                    if conn.answered_bytes:  # the endpoint had started to answer: a real failure
                        raise
                    # A kept-alive connection the endpoint had closed meanwhile: once more, fresh.
                except BaseException:
                    conn.close()
                    raise
            try:
                async with asyncio.timeout_at(deadline):
                    conn = await self._connect(origin, t)
            except TimeoutError:
                raise _NoAnswerInTime(f"no answer within {int(timeout_s * 1000)} ms") from None
            except OSError as exc:
                raise PushError(f"cannot connect to {t.host}:{t.port}: {exc.strerror or exc}") from None
            try:
                return self._checkin(origin, conn, await self._answer(conn, request, read_body, deadline, timeout_s))
            except BaseException:
                conn.close()
                raise

    async def _answer(self, conn: _Conn, request: bytes, read_body: int, deadline: float, timeout_s: float) -> Answer:
        """Send and wait for the answer until ``deadline`` (see :class:`_Deadlines`)."""
        waiter = conn.send(request, read_body)
        self._deadlines.add(waiter, deadline, timeout_s)
        try:
            return await waiter
        finally:
            self._deadlines.discard(waiter)

    def _checkin(self, origin: _Origin, conn: _Conn, answer: Answer) -> Answer:
        if conn.reusable():
            conn.idle_since = time.monotonic()
            origin.idle.append(conn)
        else:
            conn.close()
        return answer

    def _idle(self, origin: _Origin) -> _Conn | None:
        now = time.monotonic()
        while origin.idle:
            conn = origin.idle.pop()
            if conn.reusable() and now - conn.idle_since < self._idle_s:
                return conn
            conn.close()
        return None

    async def _connect(self, origin: _Origin, t: Target) -> _Conn:
        now = time.monotonic()
        if now - origin.resolved_at > self._dns_ttl_s:
            addresses = await asyncio.to_thread(self._policy.resolve, t.host)
            self._policy.check_addresses(f"{t.scheme}://{t.host}:{t.port}/", t.host, addresses)  # EndpointRefused
            origin.addresses = [str(a) for a in addresses]
            origin.resolved_at = now
        self._rr += 1
        address = origin.addresses[self._rr % len(origin.addresses)]
        ctx: ssl.SSLContext | None = None
        if t.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ctx = self._ssl
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, address, t.port, ssl=ctx, server_hostname=t.host if ctx else None)
        return conn

    def close(self) -> None:
        self._deadlines.close()
        for origin in self._origins.values():
            while origin.idle:
                origin.idle.pop().close()
