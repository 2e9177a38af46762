"""The gateway on the real broker and a real metadata database: both routes write what they say,
bad input is refused with its field and writes nothing, tokens and topic patterns are enforced,
and every answer has the shape of docs/contract.md §9."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from ferry import db, kafka
from ferry.devstack.embedded import ServiceProcess
from ferry.migrations import runner
from tests.support.gateway import ADMIN, client, gateway_process, url
from tests.support.kafka import create_topic

pytestmark = pytest.mark.integration


def read(bootstrap: str, topic: str) -> list[tuple[int, int, bytes | None, bytes | None, list]]:  # type: ignore[type-arg]
    out = []

    def take(msg) -> None:  # type: ignore[no-untyped-def]
        out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers() or []))

    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, take)
    return sorted(out)


@pytest.fixture()
def db_url(tmp_path: Path) -> str:
    url_ = f"sqlite:///{tmp_path}/meta.db"
    runner.upgrade(url_)
    return url_


@pytest.fixture()
def gateway(tmp_path: Path, kafka_bootstrap: str, db_url: str) -> Iterator[ServiceProcess]:
    proc = gateway_process(tmp_path, kafka_bootstrap, db_url, FERRY_MAX_BODY_BYTES="200000").start()
    try:
        proc.wait_ready(60)
        yield proc
    finally:
        proc.stop()


def make_token(db_url: str, scope: str, topics: list[str] | None = None, name: str = "") -> str:
    engine = db.make_engine(db_url)
    try:
        with db.session(engine) as s:
            _, plain = db.create_token(s, name or f"t-{scope}", scope, "test", topics)  # type: ignore[arg-type]
        return plain
    finally:
        engine.dispose()


def test_native_route_writes_and_answers_offsets(
    gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 3)
    body = {
        "records": [
            {"key": "k1", "value": {"n": 1}},
            {"key": "k1", "value": "plain text", "headers": {"h": "v"}},
            {"key": None, "value_b64": base64.b64encode(b"\x00\xff").decode(), "partition": 2},
            {"value": None, "partition": 1},
        ]
    }
    with client(gateway) as c:
        r = c.post(f"/api/v1/topics/{topic_name}/records", json=body)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [set(x) for x in results] == [{"partition", "offset"}] * 4
    assert results[2]["partition"] == 2 and results[3]["partition"] == 1
    assert results[0]["partition"] == results[1]["partition"] and results[1]["offset"] == results[0]["offset"] + 1
    got = {(p, o): (k, v, h) for p, o, k, v, h in read(kafka_bootstrap, topic_name)}
    assert got[(results[0]["partition"], results[0]["offset"])][:2] == (b"k1", b'{"n":1}')
    assert got[(results[1]["partition"], results[1]["offset"])] == (b"k1", b"plain text", [("h", b"v")])
    assert got[(2, results[2]["offset"])][:2] == (None, b"\x00\xff")
    assert got[(1, results[3]["offset"])][:2] == (None, None)


def test_seed_route_as_the_seed_documents_it(gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    body = {"headers": {"content": "goods", "instant": "yes"}, "topic": topic_name, "payload": "hello proxy"}
    with client(gateway) as c:
        ok = c.post("/v1/kafka/send", json=body)
        missing = c.post("/v1/kafka/send", json={"topic": topic_name})
        unknown = c.post("/v1/kafka/send", json={**body, "topic": f"{topic_name}-nope"})
    assert ok.status_code == 200
    assert ok.json() == {"code": 0, "message": "ok", "partition": 0, "offset": 0, "msg": "send success", "data": None}
    assert missing.status_code == 400 and missing.json()["code"] != 0 and "payload" in missing.json()["message"]
    assert unknown.status_code == 404 and unknown.json()["code"] == 10005  # the seed's TOPIC_NOT_EXIST
    [(_, _, key, value, headers)] = read(kafka_bootstrap, topic_name)
    assert (key, value, dict(headers)) == (None, b"hello proxy", {"content": b"goods", "instant": b"yes"})


def test_a_seed_client_reads_the_seeds_fields(gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str) -> None:
    """A client written for the seed (tal-tech/kafka-proxy) reads its answer's ``code`` and
    ``msg`` (the seed answers ``{"code", "data", "msg"}``), sends ``"x-delay": 5`` as a number (the
    seed's Message.java documents it so), sends no Content-Type or one with a charset, and a UTF-8
    byte order mark (the seed's Jackson reads it), or posts to the path with a trailing slash."""
    create_topic(kafka_bootstrap, topic_name, 1)
    kafka.ensure_topic({"bootstrap.servers": kafka_bootstrap}, "__ferry_delay", 1)
    body = {"headers": {"content": "goods", "n": 7}, "topic": topic_name, "payload": "hello proxy"}
    raw = json.dumps(body).encode()
    with client(gateway) as c:
        answers = [
            c.post("/v1/kafka/send", content=raw, headers={"content-type": kind} if kind else {})
            for kind in (None, "application/json; charset=utf-8", "application/json;charset=UTF-8")
        ]
        answers.append(c.post("/v1/kafka/send", content=b"\xef\xbb\xbf" + raw))  # a BOM, as .NET writes
        answers.append(c.post("/v1/kafka/send/", content=raw))  # the seed (Spring MVC) took a trailing slash
        delayed = c.post("/v1/kafka/send", json={**body, "headers": {"x-delay": 5}})
        refused = c.post("/v1/kafka/send", json={**body, "topic": f"{topic_name}-nope"})
    for answer in answers:
        assert answer.status_code == 200 and answer.json()["code"] == 0, answer.text
        assert answer.json()["msg"] == "send success" and answer.json()["data"] is None
    assert delayed.status_code == 200 and delayed.json()["code"] == 0, delayed.text
    assert delayed.json()["scheduled"] is True and delayed.json()["msg"] == "send success"
    assert refused.status_code == 404 and refused.json()["msg"] == refused.json()["message"]
    assert refused.json()["code"] == 10005  # the seed's TOPIC_NOT_EXIST, for its clients' branches on code
    got = read(kafka_bootstrap, topic_name)
    assert [(value, dict(headers)) for *_, value, headers in got] == [
        (b"hello proxy", {"content": b"goods", "n": b"7"})
    ] * 5


def test_the_seeds_batch_route(gateway: ServiceProcess, kafka_bootstrap: str, db_url: str, topic_name: str) -> None:
    """``POST /v1/kafka/send_batch`` as the seed took it, ``{"messages": [<send body>, ...]}``:
    every message written (several topics, a delayed one), ``msg`` the seed's; a wrong message, an
    unknown topic or a topic the token may not use refuses the whole request, naming the message,
    and writes nothing; an Idempotency-Key answers a repeat without writing."""
    other = f"{topic_name}-b"
    create_topic(kafka_bootstrap, topic_name, 1)
    create_topic(kafka_bootstrap, other, 1)
    kafka.ensure_topic({"bootstrap.servers": kafka_bootstrap}, "__ferry_delay", 1)
    messages = [
        {"topic": topic_name, "payload": "one", "key": "k", "headers": {"content": "goods"}},
        {"topic": other, "payload": 2},
        {"topic": topic_name, "payload": "in 30 s", "headers": {"x-delay": "+30"}},
    ]
    with client(gateway) as c:
        ok = c.post("/v1/kafka/send_batch", json={"messages": messages}, headers={"Idempotency-Key": "b-1"})
        again = c.post("/v1/kafka/send_batch", json={"messages": messages}, headers={"Idempotency-Key": "b-1"})
        bad = c.post("/v1/kafka/send_batch", json={"messages": [messages[0], {"topic": topic_name}]})
        unknown = c.post("/v1/kafka/send_batch", json={"messages": [messages[0], {"topic": "nope-zz", "payload": "x"}]})
        empty = c.post("/v1/kafka/send_batch/", json={"messages": []})
    with client(gateway, make_token(db_url, "produce", [topic_name])) as c:
        forbidden = c.post("/v1/kafka/send_batch", json={"messages": messages})
    assert ok.status_code == 200, ok.text
    answer = ok.json()
    assert (answer["code"], answer["msg"], answer["data"]) == (0, "batch send success", None)
    first, second, delayed = answer["results"]
    assert first["offset"] == 0 and second["offset"] == 0 and delayed["scheduled"] is True
    assert again.json() == answer and again.headers["Idempotent-Replayed"] == "true"
    assert (bad.status_code, bad.json()["code"]) == (400, 400) and "messages[1].payload" in bad.json()["message"]
    assert (unknown.status_code, unknown.json()["code"]) == (404, 10005)  # the seed's TOPIC_NOT_EXIST
    assert "messages[1].topic" in unknown.json()["message"]
    assert empty.status_code == 400 and empty.json()["message"].startswith("messages:")
    assert forbidden.status_code == 403 and "messages[1].topic" in forbidden.json()["message"]
    assert [(k, v, dict(h)) for _, _, k, v, h in read(kafka_bootstrap, topic_name)] == [
        (b"k", b"one", {"content": b"goods"})
    ]
    assert [v for *_, v, _ in read(kafka_bootstrap, other)] == [b"2"]


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"value": "a", "value_b64": "YQ=="}, "records[1].value_b64"),
        ({"value_b64": "not base64!"}, "records[1].value_b64"),
        ({"key": 7}, "records[1].key"),
        ({"headers": {"h": 1}}, "records[1].headers.h"),
        ({"headers": {"": "x"}}, "records[1].headers"),
        ({"partition": 99}, "records[1].partition"),
        ({"partition": -1}, "records[1].partition"),
        ({"delay_ms": 91 * 24 * 3600 * 1000}, "records[1].delay_ms"),
        ({"delay_ms": 5, "deliver_at": 1}, "records[1].deliver_at"),
        ({"colour": "red"}, "records[1].colour"),
        ("not an object", "records[1]"),
        ({"value": json.loads("[" * 300 + "]" * 300)}, "records[1].value"),  # read, not writable back
    ],
)
def test_a_bad_record_is_refused_alone(
    gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str, record: object, field: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    with client(gateway) as c:
        r = c.post(f"/api/v1/topics/{topic_name}/records", json={"records": [{"value": "ok"}, record]})
    assert r.status_code == 200, r.text
    good, bad = r.json()["results"]
    assert set(good) == {"partition", "offset"}
    assert bad["field"] == field and bad["error"]
    assert [v for *_, v, _ in read(kafka_bootstrap, topic_name)] == [b"ok"]


def test_bad_requests(gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    path = f"/api/v1/topics/{topic_name}/records"
    with client(gateway) as c:
        malformed = c.post(path, content=b"{not json", headers={"Content-Type": "application/json"})
        too_many = c.post(path, json={"records": [{"value": 1}] * 10_001})
        empty = c.post(path, json={"records": []})
        too_big = c.post(path, json={"records": [{"value": "x" * 300_000}]})
        slash = c.post("/api/v1/topics/a%2Fb/records", json={"records": [{"value": 1}]})
        dots = c.post("/api/v1/topics/../records", json={"records": [{"value": 1}]})
        unknown = c.post(f"/api/v1/topics/{topic_name}-nope/records", json={"records": [{"value": 1}]})
    assert (malformed.status_code, malformed.json()["field"]) == (400, "body")
    assert too_many.status_code in (400, 413)
    assert (empty.status_code, empty.json()["field"]) == (400, "records")
    assert too_big.status_code == 413 and "FERRY_MAX_BODY_BYTES" in too_big.json()["error"]
    assert slash.status_code in (400, 404) and dots.status_code in (400, 404)
    assert (unknown.status_code, unknown.json()["field"]) == (404, "topic")
    assert read(kafka_bootstrap, topic_name) == []


def test_paths_and_methods_that_are_not_routes(gateway: ServiceProcess) -> None:
    with httpx.Client(base_url=url(gateway), timeout=30) as anonymous:
        unknown_anonymous = anonymous.get("/api/v1/nothing")
        head = anonymous.head("/healthz")
    with client(gateway) as c:
        unknown = c.get("/api/v1/nothing")
        wrong_method = c.get("/v1/kafka/send")
        seed_unknown = c.post("/v1/kafka/send//", json={})
    assert unknown_anonymous.status_code == 401  # no token: nothing more is said
    assert head.status_code == 200 and head.content == b""
    assert unknown.status_code == 404 and unknown.json()["field"] is None
    assert unknown.json()["error"].startswith("no route /api/v1/nothing; the gateway's routes are POST /api/v1/")
    assert wrong_method.status_code == 405 and wrong_method.headers["Allow"] == "POST"
    # the seed route's errors
    message = "GET is not allowed on /v1/kafka/send; use POST"
    assert wrong_method.json() == {"code": 405, "message": message, "msg": message, "data": None}
    assert seed_unknown.status_code == 404


def _errors(c: httpx.Client, kind: str) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(f'ferry_gateway_errors_total{{kind="{kind}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_servers_own_refusals_are_counted_and_shaped_as_the_routes(gateway: ServiceProcess) -> None:
    """Bytes that are not HTTP and a head over 64 KiB are refused before any route runs; they are
    still counted, and on the seed route they answer in its shape."""
    too_large = f"POST /v1/kafka/send HTTP/1.1\r\nHost: g\r\nX-Pad: {'p' * 70_000}\r\n\r\n".encode()
    answers = []
    with client(gateway) as c:
        before = _errors(c, "http")
        for data in (b"NOT HTTP\r\n\r\n", too_large):
            with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
                sock.sendall(data)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
                answers.append(answer)
        after = _errors(c, "http")
    not_http, seed = (a.partition(b"\r\n\r\n") for a in answers)
    assert not_http[0].startswith(b"HTTP/1.1 400 ")
    assert json.loads(not_http[2])["error"].startswith("not a valid HTTP/1.1 request")
    assert seed[0].startswith(b"HTTP/1.1 431 ")
    message = "the request's line and headers are over 65,536 bytes"
    assert json.loads(seed[2]) == {"code": 431, "message": message, "msg": message, "data": None}
    assert after - before == 2


def _expecting(gateway: ServiceProcess, path: str, token: str, body: bytes, expect: str) -> tuple[bytes, bytes]:
    """Send a request's headers with ``Expect``; what the gateway says before the body is sent,
    and (when it invited the body) its answer after."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nExpect: {expect}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(head.encode())
        first = sock.recv(65536)
        if not first.startswith(b"HTTP/1.1 100 "):
            return first, b""
        sock.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
        return first, answer


def test_expect_100_continue(gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    path = f"/api/v1/topics/{topic_name}/records"
    body = json.dumps({"records": [{"value": "x" * 5_000}]}).encode()
    invited, answer = _expecting(gateway, path, ADMIN, body, "100-continue")
    refused, _ = _expecting(gateway, path, "nope", body, "100-continue")  # answered before its body
    unknown, _ = _expecting(gateway, path, ADMIN, body, "something-else")
    assert invited.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and b'"offset":0' in answer
    assert refused.startswith(b"HTTP/1.1 401 ")
    assert unknown.startswith(b"HTTP/1.1 417 ") and b"100-continue" in unknown
    assert len(read(kafka_bootstrap, topic_name)) == 1


def test_tokens_and_topic_patterns(gateway: ServiceProcess, kafka_bootstrap: str, db_url: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    create_topic(kafka_bootstrap, f"{topic_name}.audit", 1)
    produce = make_token(db_url, "produce", [f"{topic_name}.*"])
    reader = make_token(db_url, "read")
    body = {"records": [{"value": 1}]}
    with httpx.Client(base_url=url(gateway), timeout=30) as c:
        none = c.post(f"/api/v1/topics/{topic_name}/records", json=body)
        wrong = c.post(f"/api/v1/topics/{topic_name}/records", json=body, headers={"Authorization": "Bearer nope"})
        read_only = c.post(
            f"/api/v1/topics/{topic_name}/records", json=body, headers={"Authorization": f"Bearer {reader}"}
        )
        other = c.post(
            f"/api/v1/topics/{topic_name}/records", json=body, headers={"Authorization": f"Bearer {produce}"}
        )
        allowed = c.post(
            f"/api/v1/topics/{topic_name}.audit/records", json=body, headers={"Authorization": f"Bearer {produce}"}
        )
        admin = c.post(f"/api/v1/topics/{topic_name}/records", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
        health = c.get("/healthz")
        spec = c.get("/api/v1/openapi.json", headers={"Authorization": f"Bearer {ADMIN}"})
        internal = c.post(
            "/api/v1/topics/__ferry_offsets/records", json=body, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        seed_internal = c.post(
            "/v1/kafka/send",
            json={"topic": "__consumer_offsets", "payload": "x"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
    assert (
        internal.status_code == 403 and internal.json()["field"] == "topic" and "internal" in internal.json()["error"]
    )
    assert seed_internal.status_code == 403 and seed_internal.json()["code"] != 0
    assert none.status_code == 401 and wrong.status_code == 401
    assert read_only.status_code == 403 and other.status_code == 403 and other.json()["field"] == "topic"
    assert allowed.status_code == 200 and admin.status_code == 200
    assert health.status_code == 200 and spec.json()["openapi"].startswith("3.")
    assert len(read(kafka_bootstrap, topic_name)) == 1 and len(read(kafka_bootstrap, f"{topic_name}.audit")) == 1


def test_delayed_records_wait_in_the_delay_topic(
    gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    kafka.ensure_topic({"bootstrap.servers": kafka_bootstrap}, "__ferry_delay", 1)  # other tests write it too
    body = {"records": [{"key": "k", "value": "later", "delay_ms": 60_000, "headers": {"a": "b"}}, {"value": "now"}]}
    with client(gateway) as c:
        r = c.post(f"/api/v1/topics/{topic_name}/records", json=body)
        seed = c.post("/v1/kafka/send", json={"topic": topic_name, "payload": "p", "headers": {"x-delay": "30"}})
        bad = c.post("/v1/kafka/send", json={"topic": topic_name, "payload": "p", "headers": {"x-delay": "soon"}})
        as_http = c.post("/v1/kafka/send", headers={"x-delay": "30"}, json={"topic": topic_name, "payload": "h"})
    assert r.status_code == 200, r.text
    scheduled, now = r.json()["results"]
    assert scheduled["scheduled"] is True and scheduled["id"].startswith("__ferry_delay/")
    assert "offset" in now
    assert seed.status_code == 200 and seed.json()["code"] == 0 and seed.json()["scheduled"] is True
    assert bad.status_code == 400 and "x-delay" in bad.json()["message"]
    assert bad.json()["code"] == 10011  # the seed's DELAY_LEVEL_ERROR
    assert as_http.status_code == 200 and as_http.json()["scheduled"] is True, as_http.text
    assert [v for *_, v, _ in read(kafka_bootstrap, topic_name)] == [b"now"]
    waiting = read(kafka_bootstrap, "__ferry_delay")
    first = next(h for *_, v, h in waiting if v == b"later" and ("ferry-target-topic", topic_name.encode()) in h)
    assert dict(first) == {
        "a": b"b",
        "ferry-deliver-at": str(scheduled["deliver_at"]).encode(),
        "ferry-target-topic": topic_name.encode(),
    }


def test_transactions_over_http(gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    records = [{"topic": topic_name, "key": "o-1", "value": {"n": i}} for i in range(3)]
    with client(gateway) as c:
        prepared = c.post("/api/v1/transactions", json={"records": records, "check_url": "http://127.0.0.1:9/check"})
        assert prepared.status_code == 201, prepared.text
        tid = prepared.json()["id"]
        assert c.get(f"/api/v1/transactions/{tid}").json() == {"id": tid, "state": "prepared", "checks": 0}
        assert read(kafka_bootstrap, topic_name) == []
        committed = c.post(f"/api/v1/transactions/{tid}/commit")
        again = c.post(f"/api/v1/transactions/{tid}/commit")
        conflict = c.post(f"/api/v1/transactions/{tid}/rollback")
        missing = c.post("/api/v1/transactions/1.2.0123456789abcdef/commit")
        bad_url = c.post("/api/v1/transactions", json={"records": records, "check_url": "http://169.254.169.254/x"})
        bad_topic = c.post("/api/v1/transactions", json={"records": [{"value": 1}], "check_url": "http://127.0.0.1:9/"})
        misspelt = c.post(
            "/api/v1/transactions", json={"records": records, "check_url": "http://127.0.0.1:9/", "timeout": 5000}
        )
        gauges = {
            line.split(" ")[0]: float(line.rsplit(" ", 1)[1])
            for line in c.get("/metrics").text.splitlines()
            if line.startswith("ferry_gateway_txn_log_")
        }
    # One client at a time: every write went out through the quick producer. The commits came right
    # after the start, and the live view answered for them (the gateway listens once the view has
    # started); only the unknown id's commit read the log (how long it waits: test_txnlog.py).
    assert gauges == {
        "ferry_gateway_txn_log_lingering": 0.0,
        "ferry_gateway_txn_log_switches": 0.0,
        "ferry_gateway_txn_log_reads": 1.0,
        "ferry_gateway_txn_log_committed_entries": 1.0,
        "ferry_gateway_txn_log_committed_transactions": 1.0,
    }, gauges
    assert misspelt.status_code == 400 and misspelt.json()["field"] == "timeout", misspelt.text
    assert committed.status_code == 200 and committed.json()["state"] == "committed"
    assert again.json() == committed.json()
    assert conflict.status_code == 409 and missing.status_code == 404
    assert bad_url.status_code == 400 and bad_url.json()["field"] == "check_url"
    assert bad_topic.status_code == 400 and bad_topic.json()["field"] == "records[0].topic"
    written = read(kafka_bootstrap, topic_name)
    assert [dict(h)["ferry-transaction-seq"] for *_, h in written] == [b"0", b"1", b"2"]
    assert {dict(h)["ferry-transaction-id"] for *_, h in written} == {tid.encode()}


def test_transaction_verbs_need_the_right_to_every_topic(
    gateway: ServiceProcess, kafka_bootstrap: str, db_url: str, topic_name: str
) -> None:
    """A produce token acts on a transaction (commit, rollback, read) only if it could have
    prepared it; a read token may read any; an admin token may do anything."""
    mine, other = f"{topic_name}.mine", f"{topic_name}.other"
    create_topic(kafka_bootstrap, mine, 1)
    create_topic(kafka_bootstrap, other, 1)
    produce = make_token(db_url, "produce", [f"{topic_name}.m*"], name="t-mine")
    reader = make_token(db_url, "read")
    check = "http://127.0.0.1:9/check"
    with client(gateway) as admin, client(gateway, produce) as p, client(gateway, reader) as r:

        def prepare(*topics: str) -> str:
            body = {"records": [{"topic": t, "value": t} for t in topics], "check_url": check}
            prepared = admin.post("/api/v1/transactions", json=body)
            assert prepared.status_code == 201, prepared.text
            return str(prepared.json()["id"])

        theirs, mixed = prepare(other), prepare(mine, other)
        for tid in (theirs, mixed):
            refused = [
                p.post(f"/api/v1/transactions/{tid}/commit"),
                p.post(f"/api/v1/transactions/{tid}/rollback"),
                p.get(f"/api/v1/transactions/{tid}"),
            ]
            for answer in refused:
                assert answer.status_code == 403, answer.text
                assert answer.json() == {
                    "error": f"this token may not produce to topic {other!r}, which transaction {tid!r} writes to;"
                    " use a token whose topic patterns match every topic of the transaction",
                    "field": "id",
                }
            assert admin.get(f"/api/v1/transactions/{tid}").json()["state"] == "prepared"  # untouched
        assert read(kafka_bootstrap, other) == [] and read(kafka_bootstrap, mine) == []

        own = p.post("/api/v1/transactions", json={"records": [{"topic": mine, "value": 1}], "check_url": check})
        assert own.status_code == 201, own.text
        tid = own.json()["id"]
        assert p.get(f"/api/v1/transactions/{tid}").json() == {"id": tid, "state": "prepared", "checks": 0}
        seen = r.get(f"/api/v1/transactions/{tid}")
        r_commit = r.post(f"/api/v1/transactions/{tid}/commit")
        r_rollback = r.post(f"/api/v1/transactions/{tid}/rollback")
        committed = p.post(f"/api/v1/transactions/{tid}/commit")
        r_theirs = r.get(f"/api/v1/transactions/{theirs}")
        r_prepare = r.post("/api/v1/transactions", json={"records": [{"topic": mine}], "check_url": check})
        admin_rollback = admin.post(f"/api/v1/transactions/{theirs}/rollback")
    assert seen.status_code == 200 and seen.json() == {"id": tid, "state": "prepared", "checks": 0}
    for refused_read in (r_commit, r_rollback, r_prepare):
        assert refused_read.status_code == 403
        assert refused_read.json()["error"] == "a read token may not produce; use a produce or admin token"
    assert committed.status_code == 200 and committed.json()["results"] == [{"partition": 0, "offset": 0}]
    assert r_theirs.status_code == 200 and r_theirs.json()["state"] == "prepared"
    assert admin_rollback.status_code == 200 and admin_rollback.json()["state"] == "rolled_back"
    assert [v for *_, v, _ in read(kafka_bootstrap, mine)] == [b"1"] and read(kafka_bootstrap, other) == []


def test_unknown_and_non_canonical_transaction_ids_are_404_at_once(
    gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str
) -> None:
    """An id naming a partition the log does not have (it has 0-8) is as unknown as any other, and
    only the spelling the gateway hands out names a transaction."""
    create_topic(kafka_bootstrap, topic_name, 1)
    body = {"records": [{"topic": topic_name, "value": 1}], "check_url": "http://127.0.0.1:9/check"}
    with client(gateway) as c:
        tid = c.post("/api/v1/transactions", json=body).json()["id"]
        partition, offset, nonce = tid.split(".")
        unknown = [f"{p}.0.0123456789abcdef" for p in (9, 12, 100, 999999)]
        non_canonical = [f"0{partition}.{offset}.{nonce}", f"{partition}.0{offset}.{nonce}", f"+{tid}", f"{tid}\n"]
        for bad in unknown + non_canonical:
            for method, path in (("GET", ""), ("POST", "/commit"), ("POST", "/rollback")):
                started = time.monotonic()
                answer = c.request(method, f"/api/v1/transactions/{quote(bad, safe='')}{path}")
                took = time.monotonic() - started
                assert answer.status_code == 404, (bad, path, answer.status_code, answer.text)
                assert "Retry-After" not in answer.headers and took < 2.0, (bad, path, took)
                assert answer.json()["field"] == "id" and repr(bad) in answer.json()["error"]
        canonical = c.get(f"/api/v1/transactions/{tid}")
    assert canonical.status_code == 200 and canonical.json()["id"] == tid


def test_transaction_input_errors_name_the_field_to_change(
    gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    check = "http://127.0.0.1:9/check"
    with client(gateway) as c:

        def prepare(record: dict, check_url: str = check) -> httpx.Response:  # type: ignore[type-arg]
            return c.post(
                "/api/v1/transactions", json={"records": [{"topic": topic_name, **record}], "check_url": check_url}
            )

        credentials = prepare({"value": 1}, "http://user:secret@127.0.0.1:28090/check/x")
        password_only = prepare({"value": 1}, "http://:secret@127.0.0.1:28090/check/x")
        deliver_at = prepare({"value": 1, "deliver_at": int(time.time() * 1000) + 60_000})
        past = prepare({"value": 1, "deliver_at": 1})
        delay = prepare({"value": 1, "delay_ms": 5_000})
        no_delay = prepare({"value": 1, "delay_ms": None})
    for refused in (credentials, password_only):
        assert refused.status_code == 400 and refused.json() == {
            "error": "must not carry credentials; the check is sent without them"
            " (put a secret the check endpoint needs in its path)",
            "field": "check_url",
        }
    for refused, name in ((deliver_at, "deliver_at"), (past, "deliver_at"), (delay, "delay_ms")):
        assert refused.status_code == 400 and refused.json() == {
            "error": f"remove {name}: the records of a transaction are written when it commits and cannot be delayed",
            "field": f"records[0].{name}",
        }
    assert no_delay.status_code == 201, no_delay.text
    assert read(kafka_bootstrap, topic_name) == []


def test_headers_ferry_reserves_are_refused_on_every_route(
    gateway: ServiceProcess, kafka_bootstrap: str, db_url: str, topic_name: str
) -> None:
    """A user's ``ferry-target-topic`` once moved a delayed record to a topic the token may not
    write (and auto-created a missing one); a user's ``ferry-deliver-at`` delivered it early.
    Every ``ferry-`` header is refused, in any letter case, and nothing of that record is written."""
    other = f"{topic_name}.other"
    create_topic(kafka_bootstrap, topic_name, 1)
    create_topic(kafka_bootstrap, other, 1)
    kafka.ensure_topic({"bootstrap.servers": kafka_bootstrap}, "__ferry_delay", 1)
    produce = make_token(db_url, "produce", [topic_name])
    marker = f"reserved-{topic_name}"
    body = {
        "records": [
            {"value": f"{marker}-ok"},
            {"value": f"{marker}-1", "delay_ms": 500, "headers": {"ferry-target-topic": other}},
            {"value": f"{marker}-2", "delay_ms": 15_000, "headers": {"Ferry-Deliver-At": "123"}},
            {"value": f"{marker}-3", "delay_ms": 500, "headers": {"ferry-target-topic": f"{topic_name}-ghost"}},
        ]
    }
    auth = {"Authorization": f"Bearer {produce}"}
    with httpx.Client(base_url=url(gateway), timeout=30, headers=auth) as c:
        native = c.post(f"/api/v1/topics/{topic_name}/records", json=body)
        seed = c.post(
            "/v1/kafka/send",
            json={"topic": topic_name, "payload": marker, "headers": {"x-delay": "1", "ferry-target-topic": other}},
        )
        txn = c.post(
            "/api/v1/transactions",
            json={
                "records": [{"topic": topic_name, "value": marker, "headers": {"ferry-transaction-id": "x"}}],
                "check_url": "http://127.0.0.1:9/check",
            },
        )
    assert native.status_code == 200, native.text
    ok, *refused = native.json()["results"]
    assert set(ok) == {"partition", "offset"}
    assert [r["field"] for r in refused] == [
        "records[1].headers.ferry-target-topic",
        "records[2].headers.Ferry-Deliver-At",
        "records[3].headers.ferry-target-topic",
    ]
    assert all("reserved for Ferry" in r["error"] for r in refused)
    assert seed.status_code == 400 and seed.json()["code"] != 0, seed.text
    assert "headers.ferry-target-topic" in seed.json()["message"] and "reserved for Ferry" in seed.json()["message"]
    assert txn.status_code == 400 and txn.json()["field"] == "records[0].headers.ferry-transaction-id", txn.text
    assert [v for *_, v, _ in read(kafka_bootstrap, topic_name)] == [f"{marker}-ok".encode()]
    assert read(kafka_bootstrap, other) == []
    waiting = [v for *_, v, _ in read(kafka_bootstrap, "__ferry_delay") if v and v.startswith(marker.encode())]
    assert waiting == []
    names = kafka.admin({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert f"{topic_name}-ghost" not in names


def test_integers_beyond_64_bits_are_written_as_sent(
    gateway: ServiceProcess, kafka_bootstrap: str, topic_name: str
) -> None:
    """orjson reads them as floats: {"value": 12345678901234567890123} was written as
    1.2345678901234568e+22. §9: the value is written as its UTF-8 JSON text."""
    create_topic(kafka_bootstrap, topic_name, 1)
    body = (
        b'{"records": [{"value": 12345678901234567890123}, {"value": {"id": -98765432109876543210, "f": 1e-7}},'
        b' {"value": [1, 18446744073709551616]}, {"value": {"n": 1}}]}'
    )
    with client(gateway) as c:
        r = c.post(f"/api/v1/topics/{topic_name}/records", content=body, headers={"Content-Type": "application/json"})
        seed = c.post("/v1/kafka/send", json={"topic": topic_name, "payload": "12345678901234567890123"})
    assert r.status_code == 200 and seed.status_code == 200, r.text
    assert [v for *_, v, _ in read(kafka_bootstrap, topic_name)] == [
        b"12345678901234567890123",
        b'{"id":-98765432109876543210,"f":1e-7}',
        b"[1,18446744073709551616]",
        b'{"n":1}',
        b"12345678901234567890123",
    ]
