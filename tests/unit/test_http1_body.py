"""The push client's answer body (batch push mode reads it): length-delimited, chunked, delimited by
the connection's end, and cut at the limit. A real loopback server, one per case."""

from __future__ import annotations

import asyncio

import pytest

from ferry.netguard import EndpointPolicy
from ferry.worker.http1 import Answer, Http1Pool, PushError

BODY = b'{"results": []}'


@pytest.mark.parametrize(
    ("answer", "read_body", "expected"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + BODY, 1000, Answer(200, None, BODY, False)),
        (
            b"HTTP/1.1 207 Multi\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n"
            + BODY[:5]
            + b"\r\na\r\n"
            + BODY[5:]
            + b"\r\n0\r\n\r\n",
            1000,
            Answer(207, None, BODY, False),
        ),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY, 1000, Answer(200, None, BODY, False)),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + BODY, 4, Answer(200, None, BODY[:4], True)),
        (b"HTTP/1.1 503 No\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n", 1000, Answer(503, "3", b"", False)),
        # single-record pushes do not wait for the body
        (b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n" + BODY, 0, Answer(200, None, b"", False)),
    ],
)
async def test_answer_body(answer: bytes, read_body: int, expected: Answer) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if b"Connection: close" in answer:
            writer.close()
        else:
            await asyncio.sleep(0.5)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = Http1Pool(EndpointPolicy(""))
    try:
        got = await pool.post(f"http://127.0.0.1:{port}/hook", {}, b"[]", 5, read_body=read_body)
    finally:
        pool.close()
        server.close()
    assert got == expected


def test_no_answer_times_out_under_every_loop_the_pool_serves() -> None:
    """Deadlines are checked by one sweep per pool (every 50 ms). A pool used again under a new
    event loop, after the old loop closed with its sweep still scheduled, still times out a request
    that gets no answer."""
    pool = Http1Pool(EndpointPolicy(""))

    async def once(give_up_after_s: float) -> float:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await asyncio.wait_for(pool.post(f"http://127.0.0.1:{port}/hook", {}, b"x", 0.2), give_up_after_s)
        except TimeoutError:
            pass  # given up by the caller first: the pool's sweep stays scheduled on this loop
        except PushError as exc:
            assert "no answer within 200 ms" in str(exc)
        finally:
            server.close()
        return loop.time() - started

    assert asyncio.run(once(0.01)) < 0.2
    waited = asyncio.run(once(5))
    assert 0.2 <= waited < 2
    pool.close()
