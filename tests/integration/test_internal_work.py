"""Ferry's own work on a real cluster (ZooKeeper, broker, coordinator, workers): the delay store
moves scheduled records to their topics no earlier than due and survives a kill -9 of a worker,
refuses unschedulable ones to the .dlq, and the transaction back-check resolves a transaction
its producer left prepared."""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import httpx
import pytest

from ferry import kafka
from ferry.devstack.embedded import ServiceProcess
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.gateway import client, gateway_process
from tests.support.kafka import create_topic
from tests.support.wait import until

pytestmark = pytest.mark.integration


def read(bootstrap: str, topic: str) -> list:  # type: ignore[type-arg]
    out = []

    def take(msg) -> None:  # type: ignore[no-untyped-def]
        out.append(msg)

    kafka.read_to_end({"bootstrap.servers": bootstrap}, topic, take)
    return out


@pytest.fixture()
def own(tmp_path: Path, zk_connect: str, kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    """A cluster with internal work on, over delay and transaction topics of its own."""
    tag = secrets.token_hex(3)
    c = Cluster(
        tmp_path,
        zk_connect,
        kafka_bootstrap,
        FERRY_INTERNAL_WORK="true",
        FERRY_DELAY_TOPIC=f"delay-{tag}",
        FERRY_TXN_TOPIC=f"txn-{tag}",
        FERRY_IDEMPOTENCY_TOPIC=f"idem-{tag}",
        FERRY_TXN_MAX_CHECKS="3",
    )
    c.coordinator("coord")
    yield c
    c.close()


def schedule(bootstrap: str, delay_topic: str, target: str, items: list[tuple[str, int]]) -> dict[str, int]:
    """Plain-producer scheduling (§10): value → due time."""
    p = kafka.producer({"bootstrap.servers": bootstrap, "linger.ms": 1}, "test")
    now = int(time.time() * 1000)
    due = {}
    for value, delay_ms in items:
        due[value] = now + delay_ms
        headers = [("ferry-deliver-at", str(now + delay_ms).encode()), ("ferry-target-topic", target.encode())]
        p.produce(delay_topic, key=value.encode(), value=value.encode(), headers=[*headers, ("app", b"1")])
    assert p.flush(15) == 0
    return due


def test_delayed_records_arrive_on_time_and_survive_a_killed_worker(
    own: Cluster, kafka_bootstrap: str, topic_name: str
) -> None:
    delay_topic = own.env["FERRY_DELAY_TOPIC"]
    workers = [own.worker(f"w{i}") for i in range(2)]
    for w in workers:
        w.wait_ready(60)
    create_topic(kafka_bootstrap, topic_name, 2)
    until(
        lambda: any(s == "ferry-internal.delay" for s, _, _ in own.assignment()),
        timeout_s=30,
        what="delay work planned",
    )
    items = (
        [(f"a{i}", 50) for i in range(5)] + [(f"b{i}", 1_200) for i in range(5)] + [(f"c{i}", 4_000) for i in range(20)]
    )
    items += [("far", 2 * 24 * 3600 * 1000)]
    due = schedule(kafka_bootstrap, delay_topic, topic_name, items)
    # While the 4 s records wait in their levels, the worker holding most of the delay work dies.
    until(lambda: len(read(kafka_bootstrap, topic_name)) >= 10, timeout_s=30, what="the short delays delivered")
    counts: dict[str, int] = {}
    for (sub, _, _), w in own.assignment().items():
        if sub == "ferry-internal.delay":
            counts[w] = counts.get(w, 0) + 1
    victim = max(counts, key=lambda w: counts[w])
    next(w for w in workers if w.name == victim).kill()
    arrived = until(
        lambda: (msgs := read(kafka_bootstrap, topic_name)) and len({m.value() for m in msgs}) >= 30 and msgs,
        timeout_s=60,
        what="every scheduled record delivered",
    )
    late = []
    for m in arrived:
        value = m.value().decode()
        headers = dict(m.headers())
        assert headers["ferry-deliver-at"] == str(due[value]).encode() and headers["app"] == b"1"
        assert m.key() == value.encode()
        written_ms = m.timestamp()[1]
        assert written_ms >= due[value], f"{value} written {due[value] - written_ms} ms early"
        late.append(written_ms - due[value])
    assert "far" not in {m.value().decode() for m in arrived}
    print(f"lateness ms: p50={sorted(late)[len(late) // 2]} max={max(late)}")


def test_unschedulable_records_go_to_the_dlq(own: Cluster, kafka_bootstrap: str, topic_name: str) -> None:
    delay_topic = own.env["FERRY_DELAY_TOPIC"]
    own.worker("w0").wait_ready(60)
    until(
        lambda: any(s == "ferry-internal.delay" for s, _, _ in own.assignment()),
        timeout_s=30,
        what="delay work planned",
    )
    p = kafka.producer({"bootstrap.servers": kafka_bootstrap}, "test")
    p.produce(delay_topic, value=b"no-target", headers=[("ferry-deliver-at", b"1")])
    p.produce(delay_topic, value=b"bad-due", headers=[("ferry-deliver-at", b"soon"), ("ferry-target-topic", b"x")])
    assert p.flush(10) == 0
    dlq = until(lambda: len(msgs := read(kafka_bootstrap, f"{delay_topic}.dlq")) >= 2 and msgs, timeout_s=30)
    errors = {m.value(): dict(m.headers())["ferry-error"].decode() for m in dlq}
    assert "ferry-target-topic" in errors[b"no-target"] and "integer" in errors[b"bad-due"]


def test_a_transaction_left_prepared_is_checked_and_committed(
    own: Cluster, tmp_path: Path, kafka_bootstrap: str, topic_name: str, endpoint: EndpointRecorder
) -> None:
    w0 = own.worker("w0")
    w0.wait_ready(60)
    create_topic(kafka_bootstrap, topic_name, 1)
    asked: list[Received] = []

    def answer(r: Received) -> Reply:
        asked.append(r)
        return Reply(200, {"Content-Type": "application/json"}, json.dumps({"state": "commit"}).encode())

    endpoint.script = answer
    gw: ServiceProcess = gateway_process(
        tmp_path,
        kafka_bootstrap,
        own.db_url,
        **{k: v for k, v in own.env.items() if k.startswith("FERRY_") and "TOPIC" in k},
    ).start()
    try:
        gw.wait_ready(60)
        with client(gw) as c:
            r = c.post(
                "/api/v1/transactions",
                json={
                    "records": [{"topic": topic_name, "key": "k", "value": "v"}],
                    "check_url": endpoint.url + "/check",
                    "timeout_ms": 500,
                },
            )
            assert r.status_code == 201, r.text
            tid = r.json()["id"]
            until(
                lambda: c.get(f"/api/v1/transactions/{tid}").json()["state"] == "committed",
                timeout_s=30,
                what="committed by the check",
            )
            assert c.get(f"/api/v1/transactions/{tid}").json()["checks"] == 1
    finally:
        gw.stop()
    assert len(asked) == 1 and asked[0].headers["ferry-transaction-id"] == tid
    metrics = w0.metrics()
    assert 'ferry_internal{figure="txn_committed"} 1.0' in metrics and 'figure="txn_checks"} 1.0' in metrics
    [m] = read(kafka_bootstrap, topic_name)
    assert (m.key(), m.value(), dict(m.headers())["ferry-transaction-id"]) == (b"k", b"v", tid.encode())
    with httpx.Client() as h:
        assert h.get(endpoint.url + "/").status_code in (200, 404, 405)  # the endpoint is still up: no retries piled up
