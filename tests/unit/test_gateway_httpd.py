"""The gateway's HTTP/1.1 server on a real loopback socket: what a client sends (bytes, as a client
or an attacker would) and what it gets back, in order, and whether the connection stays open."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httptools
import orjson
import pytest

from ferry.gateway.httpd import MAX_HEAD_BYTES, Server
from ferry.gateway.httpmsg import HttpError, Request, Response
from tests.support.wait import until_async

LIMIT = 1000  # max body bytes


class Answers:
    """Parses the answers of one connection."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: list[dict[str, Any]] = []
        self.current: dict[str, Any] = {}

    def on_message_begin(self) -> None:
        self.current = {"headers": {}, "body": b""}

    def on_header(self, name: bytes, value: bytes) -> None:
        self.current["headers"][name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self.current["body"] += body

    def on_message_complete(self) -> None:
        self.current["status"] = self.parser.get_status_code()
        self.done.append(self.current)


async def exchange(port: int, data: bytes, answers: int, *, expect_close: bool = False) -> list[dict[str, Any]]:
    """Send ``data``; the first ``answers`` answers (and, with ``expect_close``, that the server
    then closes the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    parsed = Answers()
    try:
        async with asyncio.timeout(10):
            writer.write(data)
            while len(parsed.done) < answers:
                chunk = await reader.read(65536)
                assert chunk, f"closed after {len(parsed.done)} of {answers} answers"
                if parsed.current.get("status") == 100 or chunk.startswith(b"HTTP/1.1 100 "):
                    chunk = chunk.removeprefix(b"HTTP/1.1 100 Continue\r\n\r\n")
                parsed.parser.feed_data(chunk)
            if expect_close:
                assert await reader.read() == b"", "the connection stayed open"
    finally:
        writer.close()
    return parsed.done


class App:
    """A handler that echoes what it read, with a few paths that behave badly."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.finished: list[str] = []

    async def __call__(self, request: Request) -> Response:
        self.started.append(request.path)
        if request.path == "/refuse":  # answers before reading the body
            return Response(401, b'{"error": "no"}')
        body = await request.read()
        if request.path == "/boom":
            raise RuntimeError("a bug")
        if request.path == "/slow":
            await self.release.wait()
        if request.path == "/missing":
            raise HttpError(404)
        self.finished.append(request.path)
        echo = {"method": request.method, "path": request.path, "body": body.decode(), "x": request.headers.get("x")}
        return Response(200, orjson.dumps(echo), headers={"X-Seen": "1"})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, App, int]]:
    app = App()
    server = Server(app, max_body_bytes=LIMIT, read_timeout_s=0.5)
    port = await server.start("127.0.0.1", 0)
    yield server, app, port
    app.release.set()
    await server.close(grace_s=2)


def post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: t", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(path: str, *chunks: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    return head + b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("data", "statuses", "closes"),
    [
        (post("/a", b"{}"), [200], False),
        (post("/a", b"1") + post("/b", b"22") + post("/c", b""), [200, 200, 200], False),  # pipelined
        (b"".join(post(f"/{i}", b"x" * i) for i in range(40)), [200] * 40, False),  # over MAX_QUEUED
        (chunked("/a", b"ab", b"cd"), [200], False),
        (b"GET /a%2Fb?q=1 HTTP/1.1\r\nHost: t\r\nX: y\r\nx: z\r\n\r\n", [200], False),
        (b"GET /a HTTP/1.0\r\n\r\n", [200], True),
        (b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", [200], False),
        (b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n" + post("/b", b""), [200], True),
        (post("/missing", b""), [404], False),
        (post("/boom", b"") + post("/a", b""), [500, 200], False),  # a bug does not take the connection
        (post("/big", b"x" * (LIMIT + 1)), [413], True),
        (chunked("/big", b"x" * 600, b"y" * 600), [413], True),
        (post("/a", b"", "Expect: teapot"), [417], True),
        (b"NOT HTTP AT ALL\r\n\r\n", [400], True),
        (post("/a", b"") + b"garbage\r\n\r\n", [200, 400], True),
        (b"GET / HTTP/1.1\r\nX: " + b"v" * MAX_HEAD_BYTES + b"\r\n\r\n", [431], True),
        (b"POST /a HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", [400], True),
    ],
)
async def test_requests_and_answers(
    served: tuple[Server, App, int], data: bytes, statuses: list[int], closes: bool
) -> None:
    _, _, port = served
    got = await exchange(port, data, len(statuses), expect_close=closes)
    assert [a["status"] for a in got] == statuses
    assert all(a["headers"]["content-type"] == "application/json" and "date" in a["headers"] for a in got)
    assert all("error" in orjson.loads(a["body"]) for a in got if a["status"] >= 400)


async def test_the_servers_own_refusals_go_through_its_refusal() -> None:
    """What the server refuses itself (not HTTP, a head too large, a failed or refusing handler) is
    answered by the ``refusal`` it was given, with the request as far as it was read."""
    seen: list[tuple[str, str, int]] = []

    def refusal(request: Request, exc: HttpError) -> Response:
        seen.append((request.method, request.path, exc.status))
        return Response(exc.status, orjson.dumps({"mine": exc.message}))

    server = Server(App(), max_body_bytes=LIMIT, read_timeout_s=2, refusal=refusal)
    port = await server.start("127.0.0.1", 0)
    try:
        cases = [
            (b"NOT HTTP AT ALL\r\n\r\n", [400]),
            (post("/a", b"") + b"garbage\r\n\r\n", [200, 400]),  # not the path of the request before
            (b"POST /v1/kafka/send?x=1 HTTP/1.1\r\nX: " + b"v" * MAX_HEAD_BYTES + b"\r\n\r\n", [431]),
            (post("/boom", b""), [500]),
            (post("/missing", b""), [404]),
        ]
        for data, statuses in cases:
            got = await exchange(port, data, len(statuses))
            assert [a["status"] for a in got] == statuses
            assert "mine" in orjson.loads(got[-1]["body"])
    finally:
        await server.close(grace_s=2)
    assert seen == [
        ("GET", "", 400),
        ("GET", "", 400),
        ("GET", "/v1/kafka/send", 431),
        ("POST", "/boom", 500),
        ("POST", "/missing", 404),
    ]


async def test_what_the_handler_sees(served: tuple[Server, App, int]) -> None:
    _, _, port = served
    pipelined = post("/one", b"1") + chunked("/two", b"2", b"2") + b"GET /a%20b?q=1 HTTP/1.1\r\nX: y\r\nx: z\r\n\r\n"
    got = await exchange(port, pipelined, 3)
    assert [orjson.loads(a["body"]) for a in got] == [
        {"method": "POST", "path": "/one", "body": "1", "x": None},
        {"method": "POST", "path": "/two", "body": "22", "x": None},
        {"method": "GET", "path": "/a b", "body": "", "x": "y"},  # the first of repeated headers
    ]
    assert got[0]["headers"]["x-seen"] == "1"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"HEAD /h HTTP/1.1\r\n\r\n" + post("/after", b"!"))
    async with asyncio.timeout(5):
        head = await reader.readuntil(b"\r\n\r\n")
        after = await reader.readuntil(b"\r\n\r\n")
    writer.close()
    assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Length: 0" not in head
    assert after.startswith(b"HTTP/1.1 200 ")  # no body between the two


async def test_expect_100_continue_invites_the_body_only_when_the_handler_reads_it(
    served: tuple[Server, App, int],
) -> None:
    _, _, port = served
    for path, first in (("/a", b"HTTP/1.1 100 Continue\r\n\r\n"), ("/refuse", b"HTTP/1.1 401 ")):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = post(path, b"")[:-4].replace(b"Content-Length: 0", b"Content-Length: 2")
        writer.write(head + b"\r\nExpect: 100-continue\r\n\r\n")
        async with asyncio.timeout(5):
            assert (await reader.read(65536)).startswith(first)
            if path == "/a":
                writer.write(b"{}")
                answer = await reader.read(65536)
                assert answer.startswith(b"HTTP/1.1 200 ") and b'"body":"{}"' in answer
            else:
                assert await reader.read() == b""  # refused before its body: closed after the answer
        writer.close()


async def test_a_body_refused_before_it_arrived_still_gets_its_answer(served: tuple[Server, App, int]) -> None:
    """413 on Content-Length while the client is still sending: the server stops writing but reads
    on, so the client is not reset and reads the answer."""
    _, _, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/big", b"")[:-4].replace(b"Content-Length: 0", b"Content-Length: 300000") + b"\r\n\r\n")
    for _ in range(30):
        writer.write(b"x" * 10_000)
        await writer.drain()
    async with asyncio.timeout(5):
        answer = await reader.read()
    assert answer.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in answer
    writer.close()


async def test_read_deadline_cuts_slow_clients_not_slow_handlers(served: tuple[Server, App, int]) -> None:
    _, app, port = served
    slow_head = await asyncio.open_connection("127.0.0.1", port)
    slow_head[1].write(b"POST /a HTTP/1.1\r\nHost: t\r\n")  # never finishes
    slow_body = await asyncio.open_connection("127.0.0.1", port)
    slow_body[1].write(post("/a", b"")[:-4].replace(b"Content-Length: 0", b"Content-Length: 10") + b"\r\n\r\n12")
    idle = await asyncio.open_connection("127.0.0.1", port)
    busy = asyncio.create_task(exchange(port, post("/slow", b""), 1))
    async with asyncio.timeout(5):
        for reader, _ in (slow_head, slow_body, idle):
            assert await reader.read() == b""  # cut off at 0.5 s
    await asyncio.sleep(0.6)  # the handler takes longer than the read deadline: not cut off
    app.release.set()
    assert [a["status"] for a in await busy] == [200]
    for _, writer in (slow_head, slow_body, idle):
        writer.close()


async def test_a_handler_runs_to_its_end_when_its_client_leaves(served: tuple[Server, App, int]) -> None:
    server, app, port = served
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("/slow", b"1") + post("/never", b""))
    await until_async(lambda: "/slow" in app.started, 5, "the slow request is handled")
    writer.close()
    await until_async(lambda: not server.conns, 5, "the server saw the client leave")
    app.release.set()
    await until_async(lambda: "/slow" in app.finished, 5, "the handler ran to its end")
    assert "/never" not in app.started


async def test_close_answers_what_is_under_way_and_closes_idle_connections() -> None:
    app = App()
    server = Server(app, max_body_bytes=LIMIT, read_timeout_s=30)
    port = await server.start("127.0.0.1", 0)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    busy = asyncio.create_task(exchange(port, post("/slow", b"") + post("/a", b""), 1, expect_close=True))
    await until_async(lambda: "/slow" in app.started, 5, "the slow request is handled")
    closing = asyncio.create_task(server.close(grace_s=5))
    async with asyncio.timeout(5):
        assert await idle_reader.read() == b""
        await asyncio.sleep(0.1)
        assert not closing.done()  # waits for the answer under way
        app.release.set()
        answers = await busy
        await closing
    assert [a["status"] for a in answers] == [200] and answers[0]["headers"]["connection"] == "close"
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    idle_writer.close()
