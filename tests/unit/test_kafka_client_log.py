"""librdkafka's log lines become ``kafka.client_log`` events: one structured line each, repeats
collapsed, secrets blanked; clients kept open between uses have their queued lines served."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer

from ferry import kafka, log
from ferry.kafka_log import ClientLog, IdlePoller, RepeatLimiter, repeat_key
from tests.support.wait import until

RAW_LINE = re.compile(r"^%\d\|", re.M)  # librdkafka's own format: %3|1795421877.537|FAIL|rdkafka#...
FAIL = "[thrd:127.0.0.1:9/bootstrap]: 127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- RepeatLimiter ---------------------------------------------------------------------------

# (time, key, what admit returns: None = dropped, n = let through after n dropped)
TABLE: list[tuple[float, str, int | None]] = [
    (0.0, "a", 0),  # first of its key
    (0.1, "a", None),
    (5.0, "a", None),
    (0.2, "b", 0),  # another key has its own window
    (9.9, "a", None),
    (10.0, "a", 3),  # the window is over: through, with the 3 dropped
    (10.1, "b", None),
    (19.9, "a", None),
    (20.0, "a", 1),
    (40.0, "a", 0),  # nothing dropped since
    (40.0, "b", 1),
]


def test_repeat_limiter_table() -> None:
    clock = Clock()
    limiter = RepeatLimiter(interval_s=10.0, clock=clock)
    got = []
    for t, key, _ in TABLE:
        clock.now = 1000.0 + t
        got.append(limiter.admit(key))
    assert got == [want for _, _, want in TABLE]


def test_repeat_limiter_keeps_a_bounded_key_table() -> None:
    clock = Clock()
    limiter = RepeatLimiter(interval_s=10.0, max_keys=3, clock=clock)
    for key in ("a", "b", "c"):
        assert limiter.admit(key) == 0
    clock.now += 11
    assert limiter.admit("a") == 0  # let through again: now the most recent
    assert limiter.admit("d") == 0  # the table is full: "b", least recently let through, goes
    assert len(limiter) == 3
    assert limiter.admit("b") == 0  # forgotten, so new again
    assert limiter.admit("a") is None  # still remembered
    for i in range(10_000):
        limiter.admit(f"k{i}")
    assert len(limiter) == 3


def test_repeat_key_ignores_numbers_only() -> None:
    a = repeat_key("rdkafka#consumer-1", "FAIL", "h:9092/1: Connect failed (after 0ms in state CONNECT)")
    b = repeat_key("rdkafka#consumer-1", "FAIL", "h:9092/1: Connect failed (after 12ms in state CONNECT)")
    assert a == b
    assert a != repeat_key("rdkafka#consumer-2", "FAIL", "h:9092/1: Connect failed (after 0ms in state CONNECT)")
    assert a != repeat_key("rdkafka#consumer-1", "ERROR", "h:9092/1: Connect failed (after 0ms in state CONNECT)")
    assert a != repeat_key("rdkafka#consumer-1", "FAIL", "h:9092/1: Connect failed (after 0ms in state UP)")


# --- ClientLog -------------------------------------------------------------------------------


def events(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if '"kafka.client_log"' in line]


def test_a_librdkafka_line_becomes_one_structured_event(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup("INFO", "json")
    clock = Clock()
    sink = ClientLog("fetch", limiter=RepeatLimiter(clock=clock))
    # What confluent-kafka calls: level already mapped from syslog's, then "%s [%s] %s" and its three values.
    sink.log(40, "%s [%s] %s", "FAIL", "rdkafka#consumer-7", FAIL)
    (doc,) = events(capsys.readouterr().err)
    assert doc["level"] == "error" and doc["logger"] == "ferry.kafka"
    assert {k: doc[k] for k in ("client", "role", "facility", "thread")} == {
        "client": "rdkafka#consumer-7",
        "role": "fetch",
        "facility": "FAIL",
        "thread": "127.0.0.1:9/bootstrap",
    }
    assert doc["message"] == "127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection refused"
    assert "suppressed" not in doc


@pytest.mark.parametrize(("level", "name"), [(50, "critical"), (40, "error"), (30, "warning"), (20, "info")])
def test_levels_are_kept(capsys: pytest.CaptureFixture[str], level: int, name: str) -> None:
    log.setup("INFO", "json")
    ClientLog("r", limiter=RepeatLimiter()).log(level, "%s [%s] %s", "X", "rdkafka#producer-1", "m")
    assert [e["level"] for e in events(capsys.readouterr().err)] == [name]


def test_repeats_are_collapsed_and_counted(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup("INFO", "json")
    clock = Clock()
    sink = ClientLog("producer", limiter=RepeatLimiter(interval_s=10, clock=clock))
    for i in range(50):
        clock.now += 0.05
        sink.log(40, "%s [%s] %s", "FAIL", "rdkafka#producer-1", FAIL.replace("Connection", f"(after {i}ms) C"))
    clock.now += 10
    sink.log(40, "%s [%s] %s", "FAIL", "rdkafka#producer-1", FAIL.replace("Connection", "(after 3ms) C"))
    got = events(capsys.readouterr().err)
    assert len(got) == 2
    assert "suppressed" not in got[0] and got[1]["suppressed"] == 49


def test_debug_lines_are_dropped_below_debug_and_never_collapsed(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ClientLog("fetch", limiter=RepeatLimiter(clock=Clock()))
    log.setup("INFO", "json")
    sink.log(10, "%s [%s] %s", "FETCH", "rdkafka#consumer-1", "Fetch topic t [0] at offset 5")
    assert events(capsys.readouterr().err) == []
    log.setup("DEBUG", "json")
    for offset in range(3):
        sink.log(10, "%s [%s] %s", "FETCH", "rdkafka#consumer-1", f"Fetch topic t [0] at offset {offset}")
    assert [e["level"] for e in events(capsys.readouterr().err)] == ["debug"] * 3
    log.setup("INFO", "json")


def test_secret_setting_values_are_blanked(capsys: pytest.CaptureFixture[str]) -> None:
    log.setup("INFO", "json")
    cfg = {"sasl.username": "ferry-user", "sasl.password": "hunter2hunter2", "ssl.key.password": "pem-pass"}
    sink = ClientLog("admin", cfg, limiter=RepeatLimiter())
    sink.log(30, "%s [%s] %s", "SASL", "rdkafka#producer-1", "[thrd:sasl]: auth hunter2hunter2 pem-pass ferry-user")
    err = capsys.readouterr().err
    assert "hunter2" not in err and "pem-pass" not in err and "ferry-user" not in err
    assert events(err)[0]["message"] == "auth *** *** ***"


def test_a_failing_sink_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(RepeatLimiter):
        def admit(self, key: Any) -> int | None:
            raise RuntimeError("boom")

    log.setup("INFO", "json")
    ClientLog("r", limiter=Broken()).log(40, "%s [%s] %s", "FAIL", "rdkafka#producer-1", "m")
    ClientLog("r", limiter=RepeatLimiter()).log(40, "odd %s", 1)  # another call shape still logs
    assert [e["message"] for e in events(capsys.readouterr().err)] == ["odd 1"]


# --- IdlePoller ------------------------------------------------------------------------------


class FakeClient:
    def __init__(self, fail: bool = False) -> None:
        self.polls = 0
        self.fail = fail

    def poll(self, timeout: float = 0) -> None:
        if self.fail:
            raise RuntimeError("Consumer closed")
        self.polls += 1


def test_idle_poller_polls_idle_clients_only() -> None:
    idle = IdlePoller(interval_s=3600)  # rounds by hand here
    a, b, closed = FakeClient(), FakeClient(), FakeClient(fail=True)
    for c in (a, b, closed):
        idle.watch(c)
    assert idle.serve_once() == 2
    assert (a.polls, b.polls) == (1, 1)
    assert not idle.watching(closed)  # a client that cannot be polled any more is dropped

    in_use, release = threading.Event(), threading.Event()

    def owner() -> None:
        with idle.busy(a):
            in_use.set()
            release.wait(10)

    t = threading.Thread(target=owner)
    t.start()
    assert in_use.wait(10)
    assert idle.serve_once() == 1  # a is busy: only b
    assert (a.polls, b.polls) == (1, 2)
    release.set()
    t.join(10)

    idle.forget(b)
    with idle.busy(b):  # not watched: busy is a no-op
        pass
    assert idle.serve_once() == 1
    assert (a.polls, b.polls) == (2, 2)


def test_forget_all_stops_every_poll() -> None:
    idle = IdlePoller(interval_s=3600)
    a, b = FakeClient(), FakeClient()
    idle.watch(a)
    idle.watch(b)
    idle.forget_all()
    assert idle.serve_once() == 0
    assert (a.polls, b.polls) == (0, 0)


# --- real clients, through ferry.kafka ---------------------------------------------------------


def closed_port() -> int:
    """A port in this test's range with nothing listening."""
    for port in range(47290, 47300):
        with contextlib.suppress(OSError), socket.socket() as s:
            s.bind(("127.0.0.1", port))
            return port
    raise AssertionError("no free port in 47290-47299")


def wait_for_fail(capfd: pytest.CaptureFixture[str], serve: Callable[[], Any], role: str) -> list[dict[str, Any]]:
    seen: list[str] = []

    def failed() -> bool:
        serve()
        seen.append(capfd.readouterr().err)
        return any(e["facility"] == "FAIL" and e["role"] == role for e in events("".join(seen)))

    until(failed, timeout_s=20, what=f"a FAIL event from the {role} client", interval_s=0.1)
    err = "".join(seen)
    assert not RAW_LINE.search(err), err[-2000:]
    return events(err)


def test_every_client_kind_routes_its_log_into_ferrys(capfd: pytest.CaptureFixture[str]) -> None:
    log.setup("INFO", "json")
    cfg = {"bootstrap.servers": f"127.0.0.1:{closed_port()}"}

    consumer = kafka.consumer({**cfg, "group.id": "ferry.test"}, "t-consumer")
    try:
        got = wait_for_fail(capfd, lambda: consumer.poll(0.1), "t-consumer")
        assert "Connection refused" in got[0]["message"] and got[0]["client"].startswith("rdkafka#consumer-")
    finally:
        consumer.close()

    producer = kafka.producer(cfg, "t-producer")
    producer.produce("t", b"v")  # a producer connects only once it has something to do
    wait_for_fail(capfd, lambda: producer.poll(0.1), "t-producer")
    producer.purge()

    admin = kafka.admin(cfg, "t-admin")
    with contextlib.suppress(Exception):
        admin.list_topics(timeout=0.5)
    wait_for_fail(capfd, lambda: admin.poll(0.1), "t-admin")


def test_without_the_logger_librdkafka_writes_its_own_lines(capfd: pytest.CaptureFixture[str]) -> None:
    """The check above can fail: a client made without ferry.kafka writes straight to fd 2."""
    raw = Consumer({"bootstrap.servers": f"127.0.0.1:{closed_port()}", "group.id": "ferry.test"})
    try:
        seen: list[str] = []

        def leaked() -> bool:
            raw.poll(0.1)
            seen.append(capfd.readouterr().err)
            return bool(RAW_LINE.search("".join(seen)))

        until(leaked, timeout_s=20, what="librdkafka's own line on stderr", interval_s=0.1)
    finally:
        raw.close()


def test_an_idle_client_has_its_lines_served(capfd: pytest.CaptureFixture[str]) -> None:
    """Nobody polls a committer between commits: the idle poller hands its lines over."""
    log.setup("INFO", "json")
    idle = IdlePoller(interval_s=0.2)
    c = kafka.consumer({"bootstrap.servers": f"127.0.0.1:{closed_port()}", "group.id": "ferry.t"}, "t-idle")
    idle.watch(c)
    try:
        seen: list[str] = []

        def served() -> bool:
            seen.append(capfd.readouterr().err)
            return any(e["role"] == "t-idle" for e in events("".join(seen)))

        until(served, timeout_s=20, what="the idle client's FAIL event, served by the idle poller")
        assert not RAW_LINE.search("".join(seen))
    finally:
        idle.forget(c)
        c.close()
    started = time.monotonic()
    idle.forget(c)  # forgetting twice is harmless and does not wait
    assert time.monotonic() - started < 1
