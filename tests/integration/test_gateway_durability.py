"""The gateway's promises under faults, on real processes: a repeated Idempotency-Key writes nothing
again (through another replica, after a restart), a revoked token stops within the cache bound,
503 + Retry-After while the broker is down and recovery after, and kill -9 under load loses no
record that was answered 200."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from ferry import db
from ferry.devstack import embedded
from ferry.devstack.embedded import ServiceProcess
from ferry.migrations import runner
from tests.integration.test_gateway import make_token, read
from tests.support.gateway import ADMIN, client, gateway_process, url
from tests.support.kafka import create_topic
from tests.support.wait import until

pytestmark = pytest.mark.integration


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    url_ = f"sqlite:///{tmp_path}/meta.db"
    runner.upgrade(url_)
    return url_


@pytest.fixture()
def two(tmp_path: Path, kafka_bootstrap: str, db_url: str) -> Iterator[list[ServiceProcess]]:
    procs = [
        gateway_process(tmp_path, kafka_bootstrap, db_url, name=f"gw{i}", FERRY_GATEWAY_TOKEN_CACHE_MS="1000").start()
        for i in range(2)
    ]
    try:
        for p in procs:
            p.wait_ready(60)
        yield procs
    finally:
        for p in procs:
            p.stop()


def test_idempotency_key_across_replicas_and_restart(
    two: list[ServiceProcess], kafka_bootstrap: str, db_url: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    body = {"records": [{"key": "a", "value": i} for i in range(5)]}
    path = f"/api/v1/topics/{topic_name}/records"
    key = {"Idempotency-Key": "order-4711"}
    with client(two[0]) as a, client(two[1]) as b:
        first = a.post(path, json=body, headers=key)
        again = b.post(path, json=body, headers=key)
        other_body = b.post(path, json={"records": [{"value": "x"}]}, headers=key)
        other_key = a.post(path, json=body, headers={"Idempotency-Key": "order-4712"})
    assert first.status_code == 200 and again.status_code == 200
    assert again.json() == first.json() and again.headers.get("Idempotent-Replayed") == "true"
    assert other_body.status_code == 422 and other_body.json()["field"] == "Idempotency-Key"
    assert other_key.status_code == 200
    # What became of it can be asked without the body, on any replica; keys are per token.
    with client(two[1]) as b:
        asked = b.get("/api/v1/requests/order-4711")
        odd = b.get("/api/v1/requests/" + quote("a/b?c%", safe=""))
        unknown_method = b.post("/api/v1/requests/order-4711")
    assert asked.status_code == 200, asked.text
    assert {k: v for k, v in asked.json().items() if k != "at"} == {
        "idempotency_key": "order-4711",
        "state": "answered",
        "status": 200,
        "answer": first.json(),
    }
    assert odd.status_code == 404 and odd.json()["field"] == "Idempotency-Key"
    assert "sending it now runs it" in odd.json()["error"]
    assert unknown_method.status_code == 405
    with client(two[1], make_token(db_url, "produce", [topic_name])) as other:
        assert other.get("/api/v1/requests/order-4711").status_code == 404
    two[0].stop()
    two[0].start().wait_ready(60)
    with client(two[0]) as a:
        after_restart = a.post(path, json=body, headers=key)
        assert a.get("/api/v1/requests/order-4711").json()["answer"] == first.json()
    assert after_restart.status_code == 200 and after_restart.json() == first.json()
    assert len(read(kafka_bootstrap, topic_name)) == 10  # the first request and order-4712: nothing more


def test_a_revoked_token_stops_within_the_cache_bound(
    two: list[ServiceProcess], kafka_bootstrap: str, db_url: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    token = make_token(db_url, "produce", [topic_name])
    body = {"records": [{"value": 1}]}
    with client(two[0], token) as c:
        assert c.post(f"/api/v1/topics/{topic_name}/records", json=body).status_code == 200
        engine = db.make_engine(db_url)
        with db.session(engine) as s:
            row = db.find_token(s, token)
            assert row is not None
            row.revoked_at = db.utcnow()
        engine.dispose()
        revoked_at = time.monotonic()
        until(lambda: c.post(f"/api/v1/topics/{topic_name}/records", json=body).status_code == 401, timeout_s=10)
        assert time.monotonic() - revoked_at < 1.0 + 2.0  # FERRY_GATEWAY_TOKEN_CACHE_MS=1000, plus a request


def test_503_while_the_broker_is_down_then_recovery(tmp_path: Path, db_url: str, topic_name: str) -> None:
    broker = embedded.kafka_broker(tmp_path / "own-kafka", port=embedded.free_port()).start().wait_ready(30)
    bootstrap = f"127.0.0.1:{broker.port}"
    gw = gateway_process(tmp_path, bootstrap, db_url, FERRY_GATEWAY_PRODUCE_TIMEOUT_MS="3000").start()
    try:
        gw.wait_ready(60)
        create_topic(bootstrap, topic_name, 1)
        path = f"/api/v1/topics/{topic_name}/records"
        with client(gw) as c:
            assert c.post(path, json={"records": [{"value": 1}]}).status_code == 200
            broker.stop()
            started = time.monotonic()
            down = c.post(path, json={"records": [{"value": 2}]})
            assert down.status_code == 503 and int(down.headers["Retry-After"]) >= 1, down.text
            assert time.monotonic() - started < 6  # bounded by FERRY_GATEWAY_PRODUCE_TIMEOUT_MS, not hanging
            until(lambda: c.get("/healthz").status_code == 503, timeout_s=15)
            broker.start().wait_ready(30)
            create_topic(bootstrap, topic_name, 1)  # memory-only broker: the topic is gone with it
            seen: list[str] = []

            def recovered() -> bool:
                r = c.post(path, json={"records": [{"value": 3}]})
                seen.append(f"{r.status_code} {r.text[:200]}")
                return r.status_code == 200

            until(recovered, timeout_s=60, what=f"a 200 after the broker came back (last: {seen[-3:]})")
    finally:
        gw.stop()
        broker.stop()


def test_kill_9_under_load_loses_no_answered_record(
    tmp_path: Path, kafka_bootstrap: str, db_url: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 3)
    gw = gateway_process(tmp_path, kafka_bootstrap, db_url).start()
    gw.wait_ready(60)
    acked: list[str] = []
    stop = threading.Event()

    def load(n: int) -> None:
        with httpx.Client(base_url=url(gw), headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as c:
            for i in range(2_000):  # bounded
                if stop.is_set():
                    return
                values = [f"{n}-{i}-{j}" for j in range(10)]
                try:
                    r = c.post(
                        f"/api/v1/topics/{topic_name}/records",
                        json={"records": [{"key": str(n), "value": v} for v in values]},
                    )
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    acked.extend(values)

    threads = [threading.Thread(target=load, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    until(lambda: len(acked) >= 2_000, timeout_s=60)
    gw.kill()
    stop.set()
    for t in threads:
        t.join(30)
    written = {v.decode() for *_, v, _ in read(kafka_bootstrap, topic_name) if v}
    missing = [v for v in acked if v not in written]
    assert acked and not missing, f"{len(missing)} of {len(acked)} answered records missing"


def test_a_slow_client_is_cut_off_and_others_are_served(
    tmp_path: Path, kafka_bootstrap: str, db_url: str, topic_name: str
) -> None:
    import socket

    create_topic(kafka_bootstrap, topic_name, 1)
    gw = gateway_process(tmp_path, kafka_bootstrap, db_url, FERRY_GATEWAY_READ_TIMEOUT_MS="1000").start()
    try:
        gw.wait_ready(60)
        slow_headers = socket.create_connection(("127.0.0.1", gw.port))
        slow_headers.sendall(b"POST /api/v1/topics/x/records HTTP/1.1\r\nHost: x\r\n")  # never finishes
        slow_body = socket.create_connection(("127.0.0.1", gw.port))
        slow_body.sendall(
            f"POST /api/v1/topics/{topic_name}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
        )
        started = time.monotonic()
        with client(gw) as c:
            assert c.post(f"/api/v1/topics/{topic_name}/records", json={"records": [{"value": 1}]}).status_code == 200
        for s in (slow_headers, slow_body):
            s.settimeout(10)
            while s.recv(65536):
                pass
            s.close()
        assert time.monotonic() - started < 5, "slow connections were not cut off near the read timeout"
    finally:
        gw.stop()
