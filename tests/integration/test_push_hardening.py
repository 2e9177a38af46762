"""The push client (worker.http1) against real local servers: DNS rebinding, a huge header block,
and an endpoint that answers early and stops reading."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.errors import EndpointRefused
from ferry.netguard import EndpointPolicy, IPAddress
from ferry.worker.http1 import MAX_HEAD_BYTES, Http1Pool, PushError
from tests.support.endpoint import EndpointRecorder, Reply
from tests.support.odd_endpoint import OddEndpoint
from tests.support.wait import until_async

pytestmark = pytest.mark.integration


class ScriptedDns:
    """A resolver that answers from a list the test changes: what a rebinding attacker controls."""

    def __init__(self, *answer: str) -> None:
        self.answer = list(answer)
        self.asked = 0

    def __call__(self, host: str) -> list[IPAddress]:
        self.asked += 1
        return [ipaddress.ip_address(a) for a in self.answer]


async def test_dns_rebinding_is_refused_at_connect_time(endpoint: EndpointRecorder) -> None:
    dns = ScriptedDns("127.0.0.1")
    policy = EndpointPolicy(["127.0.0.1/32"], resolver=dns)
    url = f"http://rebind.example:{endpoint.port}/hook"
    policy.check_url(url)  # registration: the name resolves to an allowed address
    pool = Http1Pool(policy, dns_ttl_s=0, idle_s=0)  # re-resolve and reconnect for every request
    try:
        assert (await pool.post(url, {}, b"first", 5)).status == 200
        for evil, reason in [
            ("169.254.169.254", "metadata"),
            ("::ffff:169.254.169.254", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("169.254.10.1", "link-local"),
            ("0.0.0.0", "unspecified"),
        ]:
            dns.answer = [evil]
            with pytest.raises(EndpointRefused, match=reason):
                await pool.post(url, {}, b"never sent", 5)
        dns.answer = ["127.0.0.1", "169.254.169.254"]  # one bad address of several is enough
        with pytest.raises(EndpointRefused):
            await pool.post(url, {}, b"never sent", 5)
        dns.answer = ["10.1.2.3"]  # outside FERRY_ENDPOINT_ALLOW
        with pytest.raises(EndpointRefused, match="FERRY_ENDPOINT_ALLOW"):
            await pool.post(url, {}, b"never sent", 5)
        dns.answer = ["127.0.0.1"]  # a refusal is not cached: the good answer works again
        assert (await pool.post(url, {}, b"last", 5)).status == 200
    finally:
        pool.close()
    assert [r.body for r in endpoint.snapshot()] == [b"first", b"last"], "a refused address was contacted"
    assert dns.asked == 10  # registration + one per request: every connection was checked


async def test_cached_dns_answer_is_used_only_for_its_ttl(endpoint: EndpointRecorder) -> None:
    endpoint.script = lambda r: Reply(200, headers={"Connection": "close"})  # every request needs a new connection
    dns = ScriptedDns("127.0.0.1")
    pool = Http1Pool(EndpointPolicy(resolver=dns), dns_ttl_s=3600)
    url = f"http://cached.example:{endpoint.port}/"
    try:
        for _ in range(3):
            assert (await pool.post(url, {}, b"x", 5)).status == 200
    finally:
        pool.close()
    assert dns.asked == 1 and len(endpoint.snapshot()) == 3


async def test_huge_header_block_fails_with_bounded_memory() -> None:
    with OddEndpoint() as odd:
        pool = Http1Pool(EndpointPolicy())
        try:
            with pytest.raises(PushError, match=f"exceed {MAX_HEAD_BYTES} bytes"):
                await pool.post(odd.url("huge-headers"), {}, b"x", 10)
            assert (await pool.post(odd.url("interim"), {}, b"x", 10)).status == 200  # 201 1xx answers: fine
        finally:
            pool.close()


def _process_holds_socket(local_port: int) -> bool:
    """Whether some process still holds (has a file descriptor for) the TCP socket bound to
    127.0.0.1:local_port. A closed socket may linger in the kernel with unsent data, but then its
    inode in /proc/net/tcp is 0: nobody owns it any more."""
    needle = f"0100007F:{local_port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == needle:
            return fields[9] != "0"
    return False


@pytest.fixture()
def early_answerer() -> Iterator[tuple[int, list[socket.socket]]]:
    """Reads the request head, answers 413 at once and never reads again."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    conns: list[socket.socket] = []

    def serve() -> None:
        conn, _ = srv.accept()
        conns.append(conn)
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(1)
        conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], conns
    t.join(5)
    for c in conns:
        c.close()
    srv.close()


async def test_early_answer_counts_and_the_unsent_rest_is_dropped(
    early_answerer: tuple[int, list[socket.socket]],
) -> None:
    port, conns = early_answerer
    pool = Http1Pool(EndpointPolicy())
    try:
        answer = await pool.post(f"http://127.0.0.1:{port}/", {}, b"b" * 16_000_000, 10)
    finally:
        pool.close()
    assert answer.status == 413
    # The client did not keep its socket open to flush 16 MB into an endpoint that stopped reading.
    client_port = conns[0].getpeername()[1]
    await until_async(lambda: not _process_holds_socket(client_port), timeout_s=10, what="the socket to be released")


async def test_a_kept_alive_connection_closed_by_the_endpoint_costs_no_attempt() -> None:
    with OddEndpoint() as odd:
        pool = Http1Pool(EndpointPolicy())
        try:
            # "interim" answers 200 without Connection: close and then closes: the pool keeps the
            # connection, which is dead by the time the next request takes it.
            for _ in range(5):
                assert (await pool.post(odd.url("interim"), {}, b"x", 10)).status == 200
        finally:
            pool.close()
    assert len(odd.requests) == 5


async def test_a_slow_answer_on_a_kept_alive_connection_times_out_once(endpoint: EndpointRecorder) -> None:
    """The deadline covers the whole push: an answer that does not come in time on a reused
    connection is a timeout, not an idle-close race, so no second request goes out on a fresh one."""
    endpoint.script = lambda r: Reply(200, delay_s=2.0) if r.body == b"slow" else Reply(200)
    pool = Http1Pool(EndpointPolicy(["127.0.0.1/32"]))
    try:
        assert (await pool.post(endpoint.url, {}, b"fast", 5)).status == 200  # leaves a kept-alive connection
        with pytest.raises(PushError, match="no answer within 300 ms"):
            await pool.post(endpoint.url, {}, b"slow", 0.3)
        assert (await pool.post(endpoint.url, {}, b"after", 5)).status == 200  # a fresh connection works
        assert [r.body for r in endpoint.snapshot()] == [b"fast", b"slow", b"after"]
    finally:
        pool.close()
