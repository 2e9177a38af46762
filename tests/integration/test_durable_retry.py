"""Durable retries on a real cluster (ZooKeeper, broker, coordinator, workers with the delay store):
a record the endpoint refuses leaves its partition at once — the partition's committed offset
passes it while it waits — and comes back from the delay store through ``<name>.retry``, pushed
exactly as the first time (the same headers, none of Ferry's own) but for ``ce-ferryattempt``
counting on; one that never succeeds is dead-lettered after ``max_attempts`` pushes in all, its
dead letter naming where it was first read. The status counts all of it on the source partition's
row."""

from __future__ import annotations

import secrets
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from ferry import kafka
from ferry.devstack import embedded
from ferry.subscription import PartitionRef
from ferry.worker.push import rfc3339_ms
from tests.support.cluster import Cluster, internal_work_env
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.wait import until

pytestmark = pytest.mark.integration
ADMIN = "durable-admin-token"
OWN_HEADERS = [("app", b"v1"), ("content-type", b"text/plain"), ("ferry-deliver-at", b"99")]
"""Every record's own headers: its ``ferry-deliver-at`` is its own (the delay store delivers records
with one), not Ferry's routing of a retry, and must reach the endpoint on every attempt."""
TRANSPORT = {"host", "content-length"}


@pytest.fixture()
def own(tmp_path: Path, zk_connect: str, kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, zk_connect, kafka_bootstrap, **internal_work_env())
    c.coordinator("coord")
    yield c
    c.close()


def portal(c: Cluster) -> httpx.Client:
    """A portal over the cluster's ZooKeeper, database and broker, and a client of its API."""
    port = embedded.free_port()
    env = {**c.env, "FERRY_PORTAL_PORT": str(port), "FERRY_ADMIN_TOKEN": ADMIN}
    c.processes.append(embedded.python_module("portal", ["portal"], c.tmp / "portal.log", env=env).start())
    until(lambda: embedded.port_open(port), timeout_s=30, what="the portal listening")
    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}/api/v1", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
    )


def first_push(c: Cluster, sub: str, topic: str, offset: int, timestamp_ms: int) -> dict[str, str]:
    """Exactly the headers docs/contract.md §4 gives the first push of record ``offset`` (key
    ``k<offset>``, partition 0, :data:`OWN_HEADERS`)."""
    return {
        "app": "v1",
        "ferry-deliver-at": "99",
        "content-type": "text/plain",
        "ce-specversion": "1.0",
        "ce-id": f"{topic}/0/{offset}",
        "ce-source": f"/ferry/{c.name}/{sub}",
        "ce-type": "dev.ferry.kafka.record",
        "ce-time": rfc3339_ms(timestamp_ms),
        "ce-kafkatopic": topic,
        "ce-kafkapartition": "0",
        "ce-kafkaoffset": str(offset),
        "ce-partitionkey": f"k{offset}",
        "ce-ferryattempt": "1",
    }


def pushed(r: Received) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k not in TRANSPORT}


def test_refused_records_wait_in_the_delay_store_and_count_on(
    own: Cluster, kafka_bootstrap: str, topic_name: str, endpoint: EndpointRecorder
) -> None:
    pushes: dict[str, list[int]] = defaultdict(list)  # value → ce-ferryattempt of each push

    def answer(r: Received) -> Reply:
        value = r.body.decode()
        pushes[value].append(int(r.headers["ce-ferryattempt"]))
        if value == "never":  # a retry exactly 4 s later, so the trace can see it wait
            return Reply(503, headers={"Retry-After": "4"})
        if value.startswith("flaky") and len(pushes[value]) < 3:
            return Reply(503)
        return Reply(200)

    endpoint.script = answer
    worker = own.worker("w0")
    worker.wait_ready(60)
    api = portal(own)
    create_topic(kafka_bootstrap, topic_name, 1)
    sub = f"dr-{secrets.token_hex(3)}"
    own.add_subscription(
        {
            "name": sub,
            "topics": [topic_name],
            "endpoint": {"url": endpoint.url + "/hook"},
            "ordering": "none",
            "retry": {"mode": "durable", "max_attempts": 3, "initial_backoff_ms": 4000, "max_backoff_ms": 4000},
        }
    )
    values = ["ok0", "flaky1", "ok2", "never", "ok4", "flaky5", "ok6"]
    produce(
        kafka_bootstrap,
        topic_name,
        [(f"k{i}".encode(), v.encode(), 0) for i, v in enumerate(values)],
        headers=OWN_HEADERS,
    )
    timestamps: list[int] = []
    kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, topic_name, lambda m: timestamps.append(m.timestamp()[1]))

    # Every record was pushed once; the refused ones wait in the delay store, so the partition's
    # committed offset passes them while their retries are still pending (each waits a jittered
    # 0-4 s, twice; "never" 4 s, as its Retry-After says).
    def committed() -> int | None:
        state = offset_states(kafka_bootstrap, own.offsets_topic).get(PartitionRef(sub, topic_name, 0))
        return state.committed if state is not None else None

    until(lambda: committed() == len(values), timeout_s=30, what="committed past the refused records")
    assert any(len(pushes[v]) < 3 for v in ("flaky1", "flaky5", "never")), "every retry already done: proves nothing"

    def trace(offset: int) -> dict[str, Any]:
        r = api.get(f"/subscriptions/{sub}/records/{topic_name}/0/{offset}")
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    # Acknowledged in its partition, "never" is not done: the trace shows it waiting for its next
    # push (4 s after each of its first two), on the worker that deferred it.
    waiting = until(
        lambda: (t := trace(3))["state"] == "waiting_retry" and t, timeout_s=8, what="never waiting in the trace"
    )
    assert (waiting["attempts"] in (1, 2), waiting["last_status"], waiting["worker"]) == (True, 503, "w0"), waiting
    assert waiting["next_attempt_at"] is not None
    # Nothing holds the source partition meanwhile: no stall, nothing in flight, the refused counted.
    source = next(p for p in worker.stats() if p["topic"] == topic_name)
    assert (source["stalled_s"], source["in_flight"], source["deferred"]) == (0.0, 0, 3), source

    # The retries arrive through <sub>.retry: ce-ferryattempt 1, 2, 3; then delivered or dead.
    until(
        lambda: all(pushes[v] == [1, 2, 3] for v in ("flaky1", "flaky5", "never")),
        timeout_s=60,
        what="three attempts of each refused record",
    )
    ids: dict[str, set[str]] = defaultdict(set)
    for r in endpoint.received:
        ids[r.body.decode()].add(r.ce_id)
    for i, v in enumerate(values):
        assert ids[v] == {f"{topic_name}/0/{i}"}, v  # the same ce-id on every attempt
        assert pushes[v] == ([1] if v.startswith("ok") else [1, 2, 3])
    # Every push, the retries from <sub>.retry included, is exactly the record's first push but
    # for ce-ferryattempt: its own topic, partition, offset and time, its own headers, and none of
    # Ferry's (ferry-source-*, ferry-retry-attempts, ferry-target-topic, its ferry-deliver-at).
    for r in endpoint.received:
        i = values.index(r.body.decode())
        expected = first_push(own, sub, topic_name, i, timestamps[i])
        assert pushed(r) == {**expected, "ce-ferryattempt": str(r.attempt)}, (values[i], r.attempt)

    def dead_letters() -> list:  # type: ignore[type-arg]
        got: list = []  # type: ignore[type-arg]
        kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, f"{sub}.dlq", got.append)
        return got

    dead = until(dead_letters, timeout_s=30, what="the never-accepted record dead-lettered")
    assert len(dead) == 1 and dead[0].value() == b"never"
    headers = dict(dead[0].headers())
    assert headers["ferry-source-topic"] == topic_name.encode() and headers["ferry-source-offset"] == b"3"
    assert headers["ferry-attempts"] == b"3"
    assert headers["ferry-source-timestamp"] == str(timestamps[3]).encode()  # a redrive's ce-time
    assert headers["app"] == b"v1" and headers["content-type"] == b"text/plain"
    assert not {"ferry-retry-attempts", "ferry-deliver-at", "ferry-target-topic"} & set(headers)
    assert len(endpoint.received) == 4 + 3 * 3  # nothing pushed more often than its attempts

    # The status counts the retries and the dead letter on the row of the partition the records
    # were read from; the retry topic's rows keep only that topic's offsets and lag.
    def counts(row: dict[str, Any]) -> tuple[int, int, int, int]:
        return (row["delivered"], row["retried"], row["dead_lettered"], row["deferred"])

    def settled_rows() -> list[dict[str, Any]] | None:
        rows = api.get(f"/subscriptions/{sub}/status").json()["partitions"]
        source_rows = [r for r in rows if r["topic"] == topic_name]
        return rows if source_rows and counts(source_rows[0]) == (6, 6, 1, 6) else None

    rows = until(settled_rows, timeout_s=30, what="the status's counts on the source row")
    assert rows is not None
    # 7 records: 6 delivered (2 flaky ones on their third push), 1 dead-lettered; 6 retries (two
    # per refused record); 6 deferrals (each refused record after its first and its second push).
    retry_rows = [r for r in rows if r["topic"] == f"{sub}.retry"]
    assert retry_rows and all(counts(r) == (0, 0, 0, 0) for r in retry_rows), rows
    assert all(r["lag"] == 0 for r in retry_rows), rows
    # And the trace ends where the records did.
    dead_trace = trace(3)
    assert (dead_trace["state"], dead_trace["attempts"], dead_trace["last_status"]) == ("dead_lettered", 3, 503)
    assert trace(1)["state"] == "delivered"
    api.close()
