"""A keep-alive HTTP/1.1 client that costs little CPU, for load generators that must time each step.

Use case: bench/transactions.py drives a gateway with two dependent requests per operation (a
prepare, then a commit to the id it returned) and times each, so wrk's fixed requests do not fit.
aiohttp's client spent about 0.14 ms of CPU per request on this machine's two cores, which the
measured gateway and broker then lacked; this one writes prebuilt bytes and reads the answer by its
``Content-Length``, nothing else (no redirects, cookies, chunked answers or connection reuse
beyond its own). For answers of servers we control.
"""

from __future__ import annotations

import asyncio


class RawHttpError(Exception):
    """An answer this client does not read (no ``Content-Length``), or a closed connection."""


class Connection:
    """One keep-alive connection; requests on it run one at a time."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        fixed = {"Host": f"{host}:{port}", "Content-Type": "application/json", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """POST ``body`` (JSON) to ``path``; the answer's status and body."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        request = f"POST {path} HTTP/1.1\r\n{self._head}Content-Length: {len(body)}\r\n\r\n"
        self._writer.write(request.encode() + body)
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.close()
            raise RawHttpError(f"{self.host}:{self.port} closed the connection before answering") from None
        status = int(head[9:12])
        at = head.lower().find(b"\r\ncontent-length:")
        if at < 0:
            self.close()
            raise RawHttpError(f"an answer without Content-Length from {self.host}:{self.port}: {head[:200]!r}")
        length = int(head[at + 17 : head.index(b"\r\n", at + 2)])
        body_in = await self._reader.readexactly(length) if length else b""
        if b"\r\nconnection: close" in head.lower():
            self.close()
        return status, body_in

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
