"""The push client writes a large request itself (``os.write``, without the GIL) when the transport
has nothing queued, and leaves the rest to the transport: every byte arrives once, in order, under
both event loops the worker may run on. A real loopback server, one per case."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from ferry.netguard import EndpointPolicy
from ferry.worker import http1
from ferry.worker.http1 import Http1Pool, _Conn

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def run(loop_name: str, coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        runner.run(coro())


def pattern(n: int, seed: int) -> bytes:
    """``n`` bytes that differ from any other slice of another seed: reordering would show."""
    block = hashlib.sha256(b"%d" % seed).digest()
    return (block * (n // len(block) + 1))[:n]


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_requests_of_every_size_arrive_whole_on_one_connection(loop_name: str) -> None:
    sizes = [10, http1.WRITE_THROUGH_MIN - 1, http1.WRITE_THROUGH_MIN, 300_000, 8 * 1024 * 1024]

    async def main() -> None:
        got: list[str] = []

        async def echo_digest(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                got.append(hashlib.sha256(await reader.readexactly(length)).hexdigest())
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()

        server = await asyncio.start_server(echo_digest, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Http1Pool(EndpointPolicy(""))
        try:
            for seed, size in enumerate(sizes):
                answer = await pool.post(f"http://127.0.0.1:{port}/hook", {}, pattern(size, seed), 10)
                assert answer.status == 200
            origin = next(iter(pool._origins.values()))
            assert len(origin.idle) == 1 and origin.idle[0].fd >= 0  # one kept-alive plain connection
        finally:
            pool.close()
            server.close()
        assert got == [hashlib.sha256(pattern(size, seed)).hexdigest() for seed, size in enumerate(sizes)]

    run(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_a_request_behind_queued_bytes_goes_through_the_transport(loop_name: str) -> None:
    """The first large write fills the socket (the peer is not reading yet) and the transport
    queues the rest. The peer then reads part of it, so the socket has room again while the
    event loop has not run: the second request must still go out behind the queued bytes."""
    first, second = pattern(32 * 1024 * 1024, 1), pattern(1024 * 1024, 2)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    received = bytearray()
    read_some, read_done = threading.Event(), threading.Event()

    def peer() -> None:
        sock, _ = listener.accept()
        with sock:
            read_some.wait(20)
            while len(received) < 256 * 1024:  # room again in the sender's socket
                received.extend(sock.recv(1 << 20))
            read_done.set()
            sock.settimeout(20)
            while len(received) < len(first) + len(second):
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                received.extend(chunk)

    reader = threading.Thread(target=peer, daemon=True)
    reader.start()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Conn, "127.0.0.1", port)
        waiters = []
        try:
            assert conn.fd >= 0
            waiters.append(conn.send(first))
            assert conn.transport is not None and conn.transport.get_write_buffer_size() > 0
            read_some.set()
            assert read_done.wait(20)  # without running the loop: the transport still holds bytes
            assert conn.transport.get_write_buffer_size() > 0
            waiters.append(conn.send(second))
            deadline = loop.time() + 20
            while len(received) < len(first) + len(second) and loop.time() < deadline:
                await asyncio.sleep(0.01)  # the loop writes what the transport queued
        finally:
            for waiter in waiters:
                waiter.cancel()  # no answer comes: the peer only reads
            conn.close()

    try:
        run(loop_name, main)
        reader.join(20)
    finally:
        listener.close()
    assert len(received) == len(first) + len(second)
    assert bytes(received) == first + second
