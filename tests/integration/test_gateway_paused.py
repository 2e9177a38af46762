"""The gateway while its broker is frozen (SIGSTOP, then SIGCONT), on real processes: every request
is answered within the produce timeout, a 503 is given only for records that cannot have been
written, a key whose first request failed is free again, and the in-flight bytes return to 0.
Also: a record Kafka refuses for good (too large) is that record's error, not the request's."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ferry.devstack.embedded import ServiceProcess
from ferry.migrations import runner
from tests.integration.test_gateway import read
from tests.support.gateway import client, gateway_process
from tests.support.kafka import create_topic
from tests.support.wait import until

pytestmark = pytest.mark.integration
TIMEOUT_MS = 4000


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    url_ = f"sqlite:///{tmp_path}/meta.db"
    runner.upgrade(url_)
    return url_


@pytest.fixture(params=["native", "python"])
def gw(
    request: pytest.FixtureRequest, tmp_path: Path, db_url: str, own_broker: ServiceProcess
) -> Iterator[ServiceProcess]:
    env = {"FERRY_GATEWAY_PRODUCE_TIMEOUT_MS": str(TIMEOUT_MS)}
    if request.param == "python":
        env["FERRY_NATIVE"] = "0"
    proc = gateway_process(tmp_path, f"127.0.0.1:{own_broker.port}", db_url, **env).start()
    try:
        proc.wait_ready(60)
        yield proc
    finally:
        proc.stop()


def in_flight_bytes(c: httpx.Client) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith("ferry_gateway_in_flight_bytes "):
            return float(line.split()[1])
    raise AssertionError("no ferry_gateway_in_flight_bytes in /metrics")


def internal_errors(c: httpx.Client) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith('ferry_gateway_errors_total{kind="internal"}'):
            return float(line.split()[1])
    return 0.0


def answer_for_key(c: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str], name: str) -> list[str]:
    """Repeat a keyed request until it is answered (not 409/503: the claim of a failed first request
    frees within Idempotency.claim_ttl_ms); every answer seen."""
    seen: list[str] = []

    def answered() -> bool:
        r = c.post(path, json=body, headers=headers, timeout=60)
        seen.append(f"{r.status_code} {r.headers.get('Idempotent-Replayed')} {r.text[:300]}")
        return r.status_code not in (409, 503)

    until(answered, timeout_s=20, what=f"{name}: an answer for its key (last: {seen[-2:]})")
    return seen


def test_a_frozen_broker_answers_in_time_and_never_503s_a_written_record(
    gw: ServiceProcess, own_broker: ServiceProcess, topic_name: str
) -> None:
    bootstrap = f"127.0.0.1:{own_broker.port}"
    create_topic(bootstrap, topic_name, 1)
    records = f"/api/v1/topics/{topic_name}/records"
    calls: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {}
    for wave in (1, 2):  # the second is sent after the first was answered, the broker still frozen
        calls[f"records-{wave}"] = (records, {"records": [{"value": f"records-{wave}"}]}, {})
        calls[f"seed-{wave}"] = ("/v1/kafka/send", {"topic": topic_name, "payload": f"seed-{wave}"}, {})
        calls[f"records+key-{wave}"] = (
            records,
            {"records": [{"value": f"records+key-{wave}"}]},
            {"Idempotency-Key": f"k-records-{wave}"},
        )
        calls[f"seed+key-{wave}"] = (
            "/v1/kafka/send",
            {"topic": topic_name, "payload": f"seed+key-{wave}"},
            {"Idempotency-Key": f"k-seed-{wave}"},
        )
    with client(gw) as c:
        assert c.post(records, json={"records": [{"value": "before"}]}).status_code == 200
        # Warm the idempotency path so the frozen broker is met by the records, not by start-up.
        warm = c.post(records, json={"records": [{"value": "warm"}]}, headers={"Idempotency-Key": "w"})
        assert warm.status_code == 200
    answers: dict[str, tuple[int, str, float]] = {}

    def call(name: str) -> None:
        path, body, headers = calls[name]
        started = time.monotonic()
        with client(gw) as c:
            try:
                r = c.post(path, json=body, headers=headers, timeout=60)
                answers[name] = (r.status_code, r.text, time.monotonic() - started)
            except httpx.HTTPError as exc:
                answers[name] = (0, repr(exc), time.monotonic() - started)

    def wave(n: int) -> list[threading.Thread]:
        threads = [threading.Thread(target=call, args=(name,)) for name in calls if name.endswith(f"-{n}")]
        for t in threads:
            t.start()
        return threads

    own_broker.kill(signal.SIGSTOP)
    try:
        first = wave(1)
        for t in first:
            t.join(60)
        second = wave(2)
        time.sleep(TIMEOUT_MS / 1000 * 1.5)
    finally:
        own_broker.kill(signal.SIGCONT)
    for t in second:
        t.join(60)
    bound = TIMEOUT_MS / 1000 + 2.5  # the produce timeout, plus recording a keyed answer, plus slack
    for name, (status, text, took) in answers.items():
        assert status != 0, f"{name}: no answer ({text})"
        assert took < bound, f"{name}: answered after {took:.1f} s > {bound} s: {status} {text}"
        assert status in (503, 504), f"{name}: {status} {text} while the broker was frozen"
    assert set(answers) == set(calls)
    with client(gw) as c:
        until(lambda: in_flight_bytes(c) == 0, timeout_s=15, what="in-flight bytes back to 0")
    written = {v.decode() for _, _, _, v, _ in read(bootstrap, topic_name) if v is not None}
    for name, (status, text, _) in answers.items():
        if status == 503:
            assert name not in written, f"{name}: answered 503 ({text}) yet written"
    with client(gw) as c:
        for name in calls:  # a key answers the same again, or runs again if nothing was written
            path, body, headers = calls[name]
            if not headers:
                continue
            seen = answer_for_key(c, path, body, headers, name)
            first = answers[name][0]
            assert seen[-1].startswith("504 true" if first == 504 else "200 None"), (first, seen)
        assert internal_errors(c) == 0
    written_after = [v.decode() for _, _, _, v, _ in read(bootstrap, topic_name) if v is not None]
    for name in calls:
        assert written_after.count(name) <= 1, f"{name} written twice: {written_after}"


def test_a_record_too_large_for_kafka_is_its_own_error(
    gw: ServiceProcess, own_broker: ServiceProcess, topic_name: str
) -> None:
    bootstrap = f"127.0.0.1:{own_broker.port}"
    create_topic(bootstrap, topic_name, 1)
    big = "x" * 1_040_000
    with client(gw) as c:
        r = c.post(
            f"/api/v1/topics/{topic_name}/records",
            json={"records": [{"value": "small-1"}, {"value": big}, {"value": "small-2"}]},
        )
        assert r.status_code == 200, r.text
        first, refused, last = r.json()["results"]
        assert "offset" in first and "offset" in last, r.text
        assert refused["field"] == "records[1].value" and "1,000,000" in refused["error"], refused
        seed = c.post("/v1/kafka/send", json={"topic": topic_name, "payload": big})
        assert seed.status_code == 400 and "1,000,000" in seed.json()["message"], seed.text
        assert "Retry-After" not in seed.headers
        # The seed's batch route: the other messages are written; the refused one comes back in the
        # seed's failed list (code 10007) to be sent again, and its result says why.
        batch = c.post(
            "/v1/kafka/send_batch",
            json={"messages": [{"topic": topic_name, "payload": "small-3"}, {"topic": topic_name, "payload": big}]},
        )
        assert batch.status_code == 200, batch.text
        answer = batch.json()
        assert (answer["code"], answer["data"]) == (10007, [{"topic": topic_name, "payload": big}])
        kept, too_large = answer["results"]
        assert "offset" in kept and too_large["field"] == "messages[1].payload" and "1,000,000" in too_large["error"]
        assert in_flight_bytes(c) == 0
    values = [v for _, _, _, v, _ in read(bootstrap, topic_name)]
    assert values == [b"small-1", b"small-2", b"small-3"]
