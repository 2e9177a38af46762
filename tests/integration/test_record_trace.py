"""The record trace on a real stack (ferry dev: ZooKeeper, broker, coordinator, worker, portal):
records placed in every state of docs/contract.md §12 are answered with that state."""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
import pytest

from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, produce
from tests.support.stack import DevStack
from tests.support.wait import until

pytestmark = pytest.mark.integration


def test_every_state_of_the_trace(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    def script(r: Received) -> Reply:
        if r.key == "slow":
            return Reply(200, delay_s=20)
        if r.key == "retry":
            return Reply(503)
        if r.key == "bad":
            return Reply(422)
        return Reply(200)

    endpoint.script = script
    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        topic = f"trace-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 1)
        api = httpx.Client(
            base_url=s["portal_url"], headers={"Authorization": f"Bearer {s['admin_token']}"}, timeout=60
        )
        doc = {
            "name": "tr",
            "topics": [topic],
            "endpoint": {"url": endpoint.url, "timeout_ms": 60000},
            "ordering": "none",
            "retry": {"max_attempts": 50, "initial_backoff_ms": 600000, "max_backoff_ms": 600000},
            "filter": {"not": {"exact": {"kind": "skip"}}},
        }
        assert api.post("/api/v1/subscriptions", json=doc).status_code == 201
        paused = {**doc, "name": "tr-paused", "filter": None}
        assert api.post("/api/v1/subscriptions", json=paused).status_code == 201
        assert api.post("/api/v1/subscriptions/tr-paused/pause").status_code == 200
        produce(
            s["kafka_bootstrap"], topic, [(b"ok", b"0", 0), (b"slow", b"1", 0), (b"retry", b"2", 0), (b"bad", b"3", 0)]
        )
        produce(s["kafka_bootstrap"], topic, [(b"ok", b"4", 0)], headers=[("kind", b"skip")])

        def trace(sub: str, offset: int) -> dict:  # type: ignore[type-arg]
            r = api.get(f"/api/v1/subscriptions/{sub}/records/{topic}/0/{offset}")
            assert r.status_code == 200, r.text
            return r.json()  # type: ignore[no-any-return]

        expected = {0: "delivered", 1: "in_flight", 2: "waiting_retry", 3: "dead_lettered", 4: "filtered"}
        until(
            lambda: all(trace("tr", o)["state"] == state for o, state in expected.items()),
            timeout_s=60,
            what=f"every record in its state {expected}",
        )

        # Backoff is full jitter (a random delay in [0, 600 s]), so the record may have been pushed
        # again by now: its count must be the endpoint's.
        def pushes_of_retry() -> int:
            return max(r.attempt for r in endpoint.snapshot() if r.key == "retry")

        until(
            lambda: trace("tr", 2)["attempts"] == pushes_of_retry(),
            timeout_s=10,
            what="the waiting record's attempts equal the pushes the endpoint saw",
        )
        waiting = trace("tr", 2)
        assert waiting["attempts"] >= 1 and waiting["last_status"] == 503 and waiting["worker"] == "worker-1"
        assert waiting["next_attempt_at"] is not None
        assert trace("tr", 1)["worker"] == "worker-1"
        dead = trace("tr", 3)
        assert dead["attempts"] == 1 and dead["last_error"] and dead["last_status"] == 422
        assert trace("tr", 5)["state"] == "not_in_log" and trace("tr", 10_000)["state"] == "not_in_log"
        assert trace("tr-paused", 0)["state"] == "not_yet_fetched"
        assert set(trace("tr", 0)) == {
            "topic",
            "partition",
            "offset",
            "state",
            "attempts",
            "last_status",
            "last_error",
            "worker",
            "next_attempt_at",
            "cluster",  # docs/contract.md §13: the Kafka cluster, "default" here
        }
        assert trace("tr", 0)["cluster"] == "default"
        no_partition = api.get(f"/api/v1/subscriptions/tr/records/{topic}/7/0")
        assert no_partition.status_code == 404
        assert no_partition.json() == {
            "error": f"topic {topic!r} has no partition 7: its only partition is 0",
            "field": "partition",
        }
        # a topic the subscription reads that does not exist: said so, not "has no partition 0"
        ghost = f"ghost-{secrets.token_hex(3)}"
        ghost_doc = {**paused, "name": "tr-ghost", "topics": [ghost]}
        assert api.post("/api/v1/subscriptions", json=ghost_doc).status_code == 201
        missing = api.get(f"/api/v1/subscriptions/tr-ghost/records/{ghost}/0/0")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": f"topic {ghost!r} does not exist (yet) in Kafka cluster 'default': it has no records",
            "field": "topic",
        }
        assert api.get("/api/v1/subscriptions/tr/records/other/0/0").status_code == 404
        assert api.get(f"/api/v1/subscriptions/tr/records/{topic}/0/x").status_code == 400
