"""Worker under faults: kill -9 and restart, Retry-After, an endpoint that is down, odd records and odd endpoints."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ferry import kafka
from ferry.subscription import PartitionRef
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration


def test_kill_9_and_restart_redelivers_nothing_acknowledged(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic, parts, n, window = f"crash-{secrets.token_hex(3)}", 4, 6_000, 16
    offsets_topic = f"__offsets-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, parts)
    produce(kafka_bootstrap, topic, ((f"k{i % 97}".encode(), f"v{i}".encode(), i % parts) for i in range(n)))
    endpoint.script = lambda r: Reply(200, delay_s=0.005)
    sub = {"name": "crash", "topics": [topic], "endpoint": {"url": endpoint.url}, "max_in_flight": window}
    w = static_worker(tmp_path, "wc", kafka_bootstrap, offsets_topic, [sub]).start()
    w.wait_ready(30)
    endpoint.wait_for(lambda rs: len(rs) >= n // 3, timeout_s=60, what="a third of the records")
    w.kill()
    killed_at = time.time()
    restored = offset_states(kafka_bootstrap, offsets_topic)
    before = endpoint.snapshot()
    assert len({r.ce_id for r in before}) < n, "the worker finished before it was killed; make the run longer"

    w2 = static_worker(tmp_path, "wc2", kafka_bootstrap, offsets_topic, [sub]).start()
    try:
        w2.wait_ready(30)
        got = endpoint.wait_for(lambda rs: len({r.ce_id for r in rs}) >= n, timeout_s=120, what="every record")
    finally:
        w2.stop()
    counts = Counter(r.ce_id for r in got)
    duplicates = [cid for cid, c in counts.items() if c > 1]
    for cid in duplicates:
        _, p, off = cid.rsplit("/", 2)
        state = restored.get(PartitionRef("crash", topic, int(p)))
        assert state is None or not state.is_acked(int(off)), f"{cid} was acknowledged before the crash yet redelivered"
    # Only what was in flight, or acknowledged after the last offset flush, can come twice.
    flush_s = 0.2 * 2 + 0.2
    recent = Counter(r.partition for r in _firsts(before) if r.at > killed_at - flush_s)
    per_partition = Counter(int(cid.rsplit("/", 2)[1]) for cid in duplicates)
    for p, dups in per_partition.items():
        assert dups <= window + recent[p], f"partition {p}: {dups} duplicates > window {window} + {recent[p]}"
    print(f"kill -9: {len(duplicates)} duplicates of {n} records")


def _firsts(received: list[Received]) -> list[Received]:
    seen: set[str] = set()
    out = []
    for r in received:
        if r.ce_id not in seen:
            seen.add(r.ce_id)
            out.append(r)
    return out


def test_retry_after_delays_only_that_key(tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder) -> None:
    topic = f"ra-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)

    def script(r: Received) -> Reply:
        if r.key == "slow" and r.attempt == 1:
            return Reply(429, headers={"Retry-After": "1"})
        return Reply(200)

    endpoint.script = script
    produce(kafka_bootstrap, topic, [(b"slow", b"x", 0)] + [(f"k{i}".encode(), b"y", 0) for i in range(30)])
    sub = {"name": "ra", "topics": [topic], "endpoint": {"url": endpoint.url}}
    w = static_worker(tmp_path, "wra", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        got = endpoint.wait_for(lambda rs: len(rs) >= 32, timeout_s=30, what="all records and the retry")
    finally:
        w.stop()
    slow = [r for r in got if r.key == "slow"]
    assert [r.attempt for r in slow] == [1, 2]
    assert slow[1].at - slow[0].at >= 1.0
    others = [r for r in got if r.key != "slow"]
    assert max(r.at for r in others) < slow[1].at, "other keys waited for the 429'd key"


def test_endpoint_down_for_10_s_then_everything_arrives(tmp_path: Path, kafka_bootstrap: str) -> None:
    topic = f"down-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 2)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/hook"
    produce(kafka_bootstrap, topic, ((f"k{i}".encode(), b"v", i % 2) for i in range(200)))
    sub = {
        "name": "down",
        "topics": [topic],
        "endpoint": {"url": url, "timeout_ms": 1000},
        "retry": {"max_attempts": 100, "initial_backoff_ms": 100, "max_backoff_ms": 1000},
    }
    w = static_worker(tmp_path, "wd", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: sum(s["retried"] for s in w.stats()) > 0, timeout_s=15, what="retries while the endpoint is down")
        down_until = time.monotonic() + 10
        until(lambda: time.monotonic() >= down_until, timeout_s=15, what="10 s of outage")
        ep = EndpointRecorder()
        ep.port = port
        with ep:
            got = ep.wait_for(lambda rs: len({r.ce_id for r in rs}) >= 200, timeout_s=30, what="every record")
        assert max(r.attempt for r in got) > 1
        stats = w.stats()
        assert sum(s["dead_lettered"] for s in stats) == 0
        assert all(s["committed"] == 100 for s in stats)
    finally:
        w.stop()


def _free_port() -> int:
    from ferry.devstack.embedded import free_port

    return free_port()


def test_odd_records_are_delivered_as_the_contract_says(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic = f"odd-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    big = secrets.token_bytes(1_000_000)  # 1 MB, within Kafka's default 1 MiB message limit
    produce(kafka_bootstrap, topic, [(None, None, 0), (b"\xff\xfekey", b"", 0), (b"big", big, 0)])
    odd_headers = [("bad name", b"x"), ("trace", b"\x00\x01"), ("ok", b"1")]
    produce(kafka_bootstrap, topic, [(b"h", b"hdr", 0)], headers=odd_headers)
    flaky: set[str] = set()

    def script(r: Received) -> Reply:
        if r.ce_id not in flaky:  # first push of each record: the connection is dropped
            flaky.add(r.ce_id)
            return Reply(close=True)
        return Reply(200)

    endpoint.script = script
    sub = {"name": "odd", "topics": [topic], "endpoint": {"url": endpoint.url}, "retry": {"initial_backoff_ms": 20}}
    w = static_worker(tmp_path, "wo", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        got = endpoint.wait_for(lambda rs: len(rs) >= 8, timeout_s=30, what="two attempts of four records")
        until(lambda: w.stats()[0]["committed"] == 4, timeout_s=15, what="all acknowledged")
    finally:
        w.stop()
    ok = {r.offset: r for r in got if r.attempt == 2}
    assert ok[0].body == b"" and "ce-partitionkey" not in ok[0].headers
    assert ok[1].headers["ce-partitionkey"] == "%FF%FEkey"
    assert ok[2].body == big
    assert ok[3].headers["ok"] == "1" and ok[3].headers["trace"] == "%00%01" and "bad name" not in ok[3].headers


def test_garbage_answers_are_retried_then_dead_lettered(tmp_path: Path, kafka_bootstrap: str) -> None:
    topic = f"garbage-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                conn.sendall(b"NOT HTTP AT ALL\r\n\x00\xff\r\n\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    produce(kafka_bootstrap, topic, [(b"a", b"1", 0), (b"b", b"2", 0)])
    sub = {
        "name": "garbage",
        "topics": [topic],
        "endpoint": {"url": f"http://127.0.0.1:{port}/"},
        "retry": {"max_attempts": 2, "initial_backoff_ms": 10, "max_backoff_ms": 20},
    }
    w = static_worker(tmp_path, "wg", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        until(lambda: w.stats()[0]["committed"] == 2, timeout_s=30, what="both dead-lettered and acknowledged")
        assert w.stats()[0]["dead_lettered"] == 2 and w.alive()
    finally:
        w.stop()
        stop.set()
        t.join(5)
        srv.close()
    dlq: list[dict[str, bytes]] = []
    kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, "garbage.dlq", lambda m: dlq.append(dict(m.headers())))
    assert sorted(h["ferry-source-offset"] for h in dlq) == [b"0", b"1"]  # different keys: any order
    assert all(h["ferry-attempts"] == b"2" for h in dlq)


def test_push_time_endpoint_policy(tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder) -> None:
    """The SSRF policy is enforced again when the worker connects, not only at registration:
    an endpoint whose name resolves outside FERRY_ENDPOINT_ALLOW is never contacted."""
    topic = f"ssrf-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    produce(kafka_bootstrap, topic, [(b"k", b"v", 0)])
    sub = {
        "name": "ssrf",
        "topics": [topic],
        "endpoint": {"url": f"http://localhost:{endpoint.port}/hook"},
        "retry": {"max_attempts": 2, "initial_backoff_ms": 10, "max_backoff_ms": 20},
    }
    w = static_worker(
        tmp_path,
        "wssrf",
        kafka_bootstrap,
        f"__offsets-{secrets.token_hex(3)}",
        [sub],
        env={"FERRY_ENDPOINT_ALLOW": "10.0.0.0/8"},
    ).start()
    try:
        w.wait_ready(30)
        until(lambda: w.stats()[0]["dead_lettered"] == 1, timeout_s=30, what="refused, then dead-lettered")
    finally:
        w.stop()
    assert endpoint.snapshot() == [], "the refused endpoint was contacted"
    dlq: list[dict[str, bytes]] = []
    kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, "ssrf.dlq", lambda m: dlq.append(dict(m.headers())))
    assert b"FERRY_ENDPOINT_ALLOW" in dlq[0]["ferry-error"]
