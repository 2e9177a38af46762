"""The back-check's commit on the real stack (a gateway, a worker running the back-checks, the
coordinator): a transaction its producer left undecided is committed by the check, and the
producer's own commit afterwards answers where each record went, as any commit does (§9, §11)."""

from __future__ import annotations

import json

import pytest

from ferry import kafka
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.gateway import client
from tests.support.kafka import create_topic
from tests.support.txn_stack import Stack
from tests.support.wait import until

pytestmark = pytest.mark.integration


def test_a_commit_after_the_back_checks_commit_answers_where_records_went(
    txn_stack: Stack, kafka_bootstrap: str, topic_name: str, endpoint: EndpointRecorder
) -> None:
    txn_stack.c.worker("w0").wait_ready(60)
    gateway = txn_stack.gateway("g1")
    create_topic(kafka_bootstrap, topic_name, 3)

    def answer(_: Received) -> Reply:
        return Reply(200, {"Content-Type": "application/json"}, json.dumps({"state": "commit"}).encode())

    endpoint.script = answer
    body = {
        "records": [{"topic": topic_name, "key": f"k{i}", "value": f"v{i}"} for i in range(4)],
        "check_url": endpoint.url + "/check",
        "timeout_ms": 1000,
    }
    with client(gateway) as c:
        prepared = c.post("/api/v1/transactions", json=body)
        assert prepared.status_code == 201, prepared.text
        tid = prepared.json()["id"]
        until(lambda: endpoint.snapshot(), timeout_s=60, what="the back-check asked the producer")
        until(
            lambda: c.get(f"/api/v1/transactions/{tid}").json()["state"] == "committed",
            timeout_s=60,
            what="the back-check's commit",
        )
        # The check's `committed` entry follows its writes; a commit before it waits for it.
        first, again = c.post(f"/api/v1/transactions/{tid}/commit"), c.post(f"/api/v1/transactions/{tid}/commit")
    assert first.status_code == 200, first.text
    assert again.json() == first.json()
    written: dict[str, tuple[int, int]] = {}

    def take(m) -> None:  # type: ignore[no-untyped-def]
        written[m.value().decode()] = (m.partition(), m.offset())

    kafka.read_to_end({"bootstrap.servers": kafka_bootstrap}, topic_name, take)
    assert first.json() == {
        "id": tid,
        "state": "committed",
        "results": [{"partition": written[f"v{i}"][0], "offset": written[f"v{i}"][1]} for i in range(4)],
    }
