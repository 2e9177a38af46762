"""The gateway's HTTP messages: a :class:`Request` as its handler sees it, the :class:`Response` it
gives, and :class:`HttpError`, an answer instead of the route's. :mod:`ferry.gateway.httpd` fills
requests as their bytes arrive.

States of a request's body: arriving → complete (:meth:`Request.read` returns it), or failed (too
large, or not HTTP: ``read`` raises the :class:`HttpError` to answer), or abandoned (the client
left: ``read`` raises :class:`ClientGone`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import orjson

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HttpError(Exception):
    """An answer the server or a handler gives instead of the route's: ``status`` with
    ``message`` (and ``headers``, e.g. ``Allow`` on a 405). The gateway turns it into JSON."""

    def __init__(self, status: int, message: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.message = message or HTTPStatus(status).phrase
        self.headers = headers or {}
        super().__init__(self.message)


class ClientGone(Exception):
    """The connection closed before the request's body arrived."""


class Response:
    """An answer: a status, a body and its type, and any other headers."""

    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self, status: int, body: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers


class Request:
    """One request: ``method``, ``path`` (percent-decoded, no query), ``headers`` (names in lower
    case; the first of repeated names), and its body through :meth:`read`. ``principal`` is the
    handler's: who sent it, once known; ``client`` the address it came from."""

    __slots__ = (
        "_body",
        "_send",
        "_size",
        "_waiter",
        "client",
        "complete",
        "error",
        "expect",
        "headers",
        "keep_alive",
        "method",
        "path",
        "principal",
        "version",
    )

    def __init__(self, send: Callable[[bytes], None], client: str = "") -> None:
        self._send = send  # writes to the connection (the 100 Continue)
        self.client = client  # the peer's address
        self._body: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self.complete = False  # the whole request has arrived
        self.error: HttpError | None = None  # the request cannot be read: this is its answer
        self.expect: str | None = None
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.method = ""
        self.path = ""
        self.principal: Any = None
        self.version = "1.1"

    async def read(self) -> bytes:
        """The whole body (``b""`` when there is none), under the connection's read deadline."""
        if self.expect is not None and self.version == "1.1":
            if self.expect.lower() != "100-continue":
                raise HttpError(417, f"Expect: {self.expect[:40]} is not supported (only 100-continue)")
            self.expect = None
            if not self.complete and self.error is None:
                self._send(_CONTINUE)
        if not self.complete and self.error is None:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self.error is not None:
            raise self.error
        body = self._body
        return body[0] if len(body) == 1 else b"".join(body)

    def feed(self, chunk: bytes, limit: int) -> None:
        self._size += len(chunk)
        if self._size > limit:
            self.fail(HttpError(413))
        elif self.error is None:
            self._body.append(chunk)

    def fail(self, error: HttpError) -> None:
        if self.error is None:
            self.error = error
            self._body = []
            self._wake()

    def finish(self) -> None:
        self.complete = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def abandon(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ClientGone("the client closed the connection"))


Handler = Callable[[Request], Awaitable[Response]]
Refusal = Callable[[Request, HttpError], Response]
"""What the server answers when it refuses a request itself (bytes that are not HTTP, a head too
large, a failed handler): the request as far as it was read, and the error."""


def plain_refusal(_: Request, exc: HttpError) -> Response:
    """The server's own answer to a refusal: ``{"error", "field": null}``."""
    return Response(exc.status, orjson.dumps({"error": exc.message, "field": None}), headers=exc.headers or None)


__all__ = ["ClientGone", "Handler", "HttpError", "Refusal", "Request", "Response", "plain_refusal"]
