"""A raw TCP "HTTP endpoint" that misbehaves on purpose, for the push path's hardening tests.

The first path segment picks the misbehaviour (see ``BEHAVIOURS``); with ``?only=<key>`` the
endpoint misbehaves only for requests whose ``ce-partitionkey`` is ``<key>`` and answers a
plain 200 to every other request, so one subscription can hold a poison key and good keys.
It runs on its own thread and event loop (like :class:`tests.support.endpoint.EndpointRecorder`),
so sync tests and worker subprocesses can use it. Every misbehaviour is bounded in time
(``HOLD_S``), so a test that fails cannot leave it running forever.

    with OddEndpoint() as odd:
        url = odd.url("slow-headers", only="poison")
        ...
        odd.requests  # [Request(behaviour, only, key, attempt, odd)] in arrival order
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

HOLD_S = 30.0  # the longest any misbehaviour lasts
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
BEHAVIOURS = (
    "redirect-301",  # 301/302/307 to the very same URL: a redirect loop if it were followed
    "redirect-302",
    "redirect-307",
    "chunked-garbage",  # 200, then a chunked body with invalid chunk sizes
    "interim",  # 200 interim 1xx answers, then the real 200
    "endless-body",  # 200 with a body that trickles forever
    "slow-headers",  # slowloris: the header block never ends
    "huge-headers",  # 1 MB of headers
    "close-delimited",  # 200 without Content-Length, body until Connection: close
    "reset",  # RST as soon as the request arrived
    "early-answer",  # 413 after the request head, before the body was read
)


class Request(NamedTuple):
    behaviour: str
    only: str | None
    key: str | None  # ce-partitionkey, decoded
    attempt: int  # ce-ferryattempt
    odd: bool  # whether the endpoint misbehaved for it


class OddEndpoint:
    def __init__(self) -> None:
        self.port = 0
        self.requests: list[Request] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    def url(self, behaviour: str, only: str | None = None) -> str:
        assert behaviour in BEHAVIOURS or behaviour == "ok", behaviour
        return f"http://127.0.0.1:{self.port}/{behaviour}" + (f"?only={only}" if only else "")

    def __enter__(self) -> OddEndpoint:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True, name="odd-endpoint")
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the odd endpoint did not start")
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # an unread body backs up to the client
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(self._serve, sock=sock, backlog=1024)  # a burst of pushes
        self.port = sock.getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HOLD_S):
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    behaviour, only, headers = _parse(head)
                    key = headers.get("ce-partitionkey")
                    odd = behaviour != "ok" and (only is None or key == only)
                    self.requests.append(Request(behaviour, only, key, int(headers.get("ce-ferryattempt", "1")), odd))
                    length = int(headers.get("content-length", "0"))
                    if odd and behaviour == "early-answer":
                        await _early_answer(reader, writer)
                        return
                    await reader.readexactly(length)
                    if not odd:
                        writer.write(OK)
                        await writer.drain()
                        continue
                    await _misbehave(behaviour, writer)
                    return
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # the endpoint is shutting down
            pass
        finally:
            writer.close()


def _parse(head: bytes) -> tuple[str, str | None, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    target = urlsplit(lines[0].split(" ")[1])
    only = parse_qs(target.query).get("only", [None])[0]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "ce-partitionkey" in headers:
        headers["ce-partitionkey"] = unquote(headers["ce-partitionkey"])
    return target.path.strip("/"), only, headers


async def _early_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    await writer.drain()
    while await reader.read(65536):  # then drain whatever the client still sends, until it leaves
        pass


async def _misbehave(behaviour: str, writer: asyncio.StreamWriter) -> None:
    if behaviour.startswith("redirect-"):
        status = behaviour.split("-")[1]
        writer.write(f"HTTP/1.1 {status} Moved\r\nLocation: /{behaviour}\r\nContent-Length: 0\r\n\r\n".encode())
    elif behaviour == "chunked-garbage":
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz-not-a-size\r\nhello\r\n-5\r\n")
    elif behaviour == "interim":
        writer.write(b"HTTP/1.1 102 Processing\r\n\r\n" * 200 + b"HTTP/1.1 100 Continue\r\n\r\n" + OK)
    elif behaviour == "endless-body":
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
        await _trickle(writer, b"x")
    elif behaviour == "slow-headers":
        writer.write(b"HTTP/1.1 200 OK\r\n")
        await _trickle(writer, b"X-Slow: 1\r\n")
    elif behaviour == "huge-headers":
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(1000)))
        writer.write(b"Content-Length: 0\r\n\r\n")
    elif behaviour == "close-delimited":
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nthe body ends when the connection does")
    elif behaviour == "reset":
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends RST
        writer.transport.abort()
        return
    await writer.drain()


async def _trickle(writer: asyncio.StreamWriter, piece: bytes) -> None:
    """Send ``piece`` every 50 ms until the client leaves (a write fails) or HOLD_S ends."""
    while not writer.is_closing():
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.05)
