"""Ferry's own work on a real cluster (ZooKeeper, broker, coordinator, workers): the delay store
moves scheduled records to their topics no earlier than due and survives a kill -9 of a worker,
refuses unschedulable ones to the .dlq, and the transaction back-check resolves a transaction
its producer left prepared."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from ferry import kafka
from ferry.devstack.embedded import ServiceProcess
from tests.support.cluster import Cluster, internal_work_env
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
    c = Cluster(tmp_path, zk_connect, kafka_bootstrap, **internal_work_env(FERRY_TXN_MAX_CHECKS="3"))
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
        assert headers == {"ferry-deliver-at": str(due[value]).encode(), "app": b"1"}  # no routing headers
        assert m.key() == value.encode()
        written_ms = m.timestamp()[1]
        assert written_ms >= due[value], f"{value} written {due[value] - written_ms} ms early"
        late.append(written_ms - due[value])
    assert "far" not in {m.value().decode() for m in arrived}
    # The survivor holds the far record at the head of its level: next_due is its due time.
    survivor = next(w for w in workers if w.name != victim)
    until(
        lambda: survivor.internal().get("delay", {}).get("next_due") == due["far"],
        timeout_s=30,
        what=f"next_due {due['far']} on the survivor",
    )
    print(f"lateness ms: p50={sorted(late)[len(late) // 2]} max={max(late)}")


def test_unschedulable_records_go_to_the_dlq(own: Cluster, kafka_bootstrap: str, topic_name: str) -> None:
    delay_topic = own.env["FERRY_DELAY_TOPIC"]
    own.worker("w0").wait_ready(60)
    until(
        lambda: any(s == "ferry-internal.delay" for s, _, _ in own.assignment()),
        timeout_s=30,
        what="delay work planned",
    )
    create_topic(kafka_bootstrap, topic_name, 1)
    ghost = f"{topic_name}-ghost"
    offsets_topic = own.env.get("FERRY_OFFSETS_TOPIC", "__ferry_offsets")
    due = [("ferry-deliver-at", b"1")]
    p = kafka.producer({"bootstrap.servers": kafka_bootstrap}, "test")
    p.produce(delay_topic, value=b"no-target", headers=due)
    p.produce(delay_topic, value=b"bad-due", headers=[("ferry-deliver-at", b"soon"), ("ferry-target-topic", b"x")])
    # Targets checked against the cluster's topics when due: none is created or written.
    p.produce(delay_topic, value=b"ghost", headers=[*due, ("ferry-target-topic", ghost.encode())])
    p.produce(delay_topic, value=b"offsets", headers=[*due, ("ferry-target-topic", offsets_topic.encode())])
    p.produce(delay_topic, value=b"own", headers=[*due, ("ferry-target-topic", delay_topic.encode())])
    p.produce(
        delay_topic,
        value=b"partition",
        headers=[*due, ("ferry-target-topic", topic_name.encode()), ("ferry-target-partition", b"1")],
    )
    p.produce(delay_topic, value=b"fine", headers=[*due, ("ferry-target-topic", topic_name.encode())])
    assert p.flush(10) == 0
    dlq = until(lambda: len(msgs := read(kafka_bootstrap, f"{delay_topic}.dlq")) >= 6 and msgs, timeout_s=30)
    errors = {m.value(): dict(m.headers())["ferry-error"].decode() for m in dlq}
    assert "ferry-target-topic" in errors[b"no-target"] and "integer" in errors[b"bad-due"]
    assert f"{ghost!r} does not exist" in errors[b"ghost"]
    assert "internal topic" in errors[b"offsets"] and "internal topic" in errors[b"own"]
    assert "ferry-target-partition 1 does not exist" in errors[b"partition"]
    assert [m.value() for m in until(lambda: read(kafka_bootstrap, topic_name), timeout_s=30)] == [b"fine"]
    assert ghost not in kafka.admin({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert b"offsets" not in {m.value() for m in read(kafka_bootstrap, offsets_topic)}
    assert [m.value() for m in read(kafka_bootstrap, delay_topic)].count(b"own") == 1  # not written back


def test_gateway_delayed_records_keep_their_partition(
    own: Cluster, tmp_path: Path, kafka_bootstrap: str, topic_name: str
) -> None:
    """§9's ``partition`` holds for a delayed record too: six keyed records for partition 0 all
    arrive there (the keys alone spread them), with ``ferry-deliver-at`` and their own headers."""
    own.worker("w0").wait_ready(60)
    create_topic(kafka_bootstrap, topic_name, 3)
    until(
        lambda: any(s == "ferry-internal.delay" for s, _, _ in own.assignment()),
        timeout_s=30,
        what="delay work planned",
    )
    env = {k: v for k, v in own.env.items() if k.startswith("FERRY_") and "TOPIC" in k}
    gw: ServiceProcess = gateway_process(tmp_path, kafka_bootstrap, own.db_url, **env).start()
    try:
        gw.wait_ready(60)
        wanted = {"partition": 0, "delay_ms": 300, "headers": {"app": "1"}}
        records = [{"key": f"k{i}", "value": f"v{i}", **wanted} for i in range(6)]
        with client(gw) as c:
            r = c.post(f"/api/v1/topics/{topic_name}/records", json={"records": records})
        assert r.status_code == 200, r.text
        due = {f"v{i}": res["deliver_at"] for i, res in enumerate(r.json()["results"])}
    finally:
        gw.stop()
    msgs = until(lambda: len(m := read(kafka_bootstrap, topic_name)) >= 6 and m, timeout_s=30)
    assert sorted(m.value().decode() for m in msgs) == sorted(due)
    assert {m.partition() for m in msgs} == {0}
    for m in msgs:
        assert dict(m.headers()) == {"app": b"1", "ferry-deliver-at": str(due[m.value().decode()]).encode()}


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


def test_ten_thousand_delays_through_both_entry_points_arrive_once_and_never_early(
    own: Cluster, tmp_path: Path, kafka_bootstrap: str, topic_name: str
) -> None:
    """10,000 records with random delays of 0-20 s, half through the gateway
    (``delay_ms``, some ``deliver_at``), half by a plain producer's headers — all arrive, each
    once, none before its due time."""
    import random

    rng = random.Random(17)
    delay_topic = own.env["FERRY_DELAY_TOPIC"]
    for w in [own.worker(f"w{i}") for i in range(2)]:
        w.wait_ready(60)
    create_topic(kafka_bootstrap, topic_name, 3)
    until(
        lambda: any(s == "ferry-internal.delay" for s, _, _ in own.assignment()),
        timeout_s=30,
        what="delay work planned",
    )
    gw: ServiceProcess = gateway_process(
        tmp_path,
        kafka_bootstrap,
        own.db_url,
        **{k: v for k, v in own.env.items() if k.startswith("FERRY_") and "TOPIC" in k},
    ).start()
    due: dict[str, int] = {}
    asked_at: dict[str, int] = {}  # value → the deliver_at it was sent with
    written_at_once: set[str] = set()
    try:
        gw.wait_ready(60)
        with client(gw) as c:
            for batch in range(50):
                records = []
                for j in range(100):
                    value, delay_ms = f"g{batch}-{j}", rng.randrange(0, 20_001)
                    rec: dict[str, object] = {"key": f"k{j % 7}", "value": value, "headers": {"app": "1"}}
                    if j % 10 == 0:
                        rec["deliver_at"] = asked_at[value] = int(time.time() * 1000) + delay_ms
                    else:
                        rec["delay_ms"] = delay_ms
                    records.append(rec)
                r = c.post(f"/api/v1/topics/{topic_name}/records", json={"records": records})
                answered_ms = int(time.time() * 1000)
                assert r.status_code == 200, r.text
                for rec, res in zip(records, r.json()["results"], strict=True):
                    value = str(rec["value"])
                    if value in asked_at and "partition" in res:  # due before the gateway read it: written at once
                        assert asked_at[value] <= answered_ms, (rec, res)
                        due[value] = asked_at[value]
                        written_at_once.add(value)
                        continue
                    assert res.get("scheduled") is True, res
                    due[value] = res["deliver_at"]
    finally:
        gw.stop()
    due.update(
        schedule(kafka_bootstrap, delay_topic, topic_name, [(f"p{i}", rng.randrange(0, 20_001)) for i in range(5_000)])
    )
    assert len(due) == 10_000

    def arrived() -> list | None:  # type: ignore[type-arg]
        msgs = read(kafka_bootstrap, topic_name)
        return msgs if len(msgs) >= 10_000 else None

    msgs = until(arrived, timeout_s=90, what="10,000 delayed records delivered", interval_s=1.0)
    values = [m.value().decode() for m in msgs]
    assert len(values) == len(set(values)) == 10_000 and set(values) == set(due)  # each once
    late = []
    for m in msgs:
        value = m.value().decode()
        headers = dict(m.headers())
        if value in written_at_once:
            assert headers == {"app": b"1"}
        else:
            assert headers == {"ferry-deliver-at": str(due[value]).encode(), "app": b"1"}
        written_ms = m.timestamp()[1]
        assert written_ms >= due[value], f"{value} written {due[value] - written_ms} ms early"
        late.append(written_ms - due[value])
    late.sort()
    print(f"\n10,000 delays: lateness ms p50={late[5_000]} p99={late[9_900]} max={late[-1]}")
