"""Durable retries on a real cluster (ZooKeeper, broker, coordinator, workers with the delay store):
a record the endpoint refuses leaves its partition at once — the partition's committed offset
passes it while it waits — and comes back from the delay store through ``<name>.retry`` with its
``ce-id`` unchanged and ``ce-ferryattempt`` counting on; one that never succeeds is dead-lettered
after ``max_attempts`` pushes in all, its dead letter naming where it was first read."""

from __future__ import annotations

import secrets
from collections import defaultdict
from pathlib import Path

import pytest

from ferry import kafka
from ferry.subscription import PartitionRef
from tests.support.cluster import Cluster, internal_work_env
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, offset_states, produce
from tests.support.wait import until

pytestmark = pytest.mark.integration


@pytest.fixture()
def own(tmp_path: Path, zk_connect: str, kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    c = Cluster(tmp_path, zk_connect, kafka_bootstrap, **internal_work_env())
    c.coordinator("coord")
    yield c
    c.close()


def test_refused_records_wait_in_the_delay_store_and_count_on(
    own: Cluster, kafka_bootstrap: str, topic_name: str, endpoint: EndpointRecorder
) -> None:
    pushes: dict[str, list[int]] = defaultdict(list)  # value → ce-ferryattempt of each push

    def answer(r: Received) -> Reply:
        value = r.body.decode()
        pushes[value].append(int(r.headers["ce-ferryattempt"]))
        if value == "never" or (value.startswith("flaky") and len(pushes[value]) < 3):
            return Reply(503)
        return Reply(200)

    endpoint.script = answer
    worker = own.worker("w0")
    worker.wait_ready(60)
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
    produce(kafka_bootstrap, topic_name, [(f"k{i}".encode(), v.encode(), 0) for i, v in enumerate(values)])

    # Every record was pushed once; the refused ones wait in the delay store, so the partition's
    # committed offset passes them while their retries are still pending (each waits a jittered
    # 0-4 s, twice).
    def committed() -> int | None:
        state = offset_states(kafka_bootstrap, own.offsets_topic).get(PartitionRef(sub, topic_name, 0))
        return state.committed if state is not None else None

    until(lambda: committed() == len(values), timeout_s=30, what="committed past the refused records")
    assert any(len(pushes[v]) < 3 for v in ("flaky1", "flaky5", "never")), "every retry already done: proves nothing"
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

    def dead_letters() -> list:  # type: ignore[type-arg]
        got: list = []  # type: ignore[type-arg]
        kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, f"{sub}.dlq", got.append)
        return got

    dead = until(dead_letters, timeout_s=30, what="the never-accepted record dead-lettered")
    assert len(dead) == 1 and dead[0].value() == b"never"
    headers = dict(dead[0].headers())
    assert headers["ferry-source-topic"] == topic_name.encode() and headers["ferry-source-offset"] == b"3"
    assert headers["ferry-attempts"] == b"3"
    assert not {"ferry-retry-attempts", "ferry-deliver-at", "ferry-target-topic"} & set(headers)
    assert len(endpoint.received) == 4 + 3 * 3  # nothing pushed more often than its attempts
