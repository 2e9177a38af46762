"""Operating a live subscription through the API: status, dead letters, redrive, reset."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import httpx
import pytest

from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, produce
from tests.support.stack import DevStack
from tests.support.wait import until

pytestmark = pytest.mark.integration


def test_dead_letters_redrive_and_reset(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    healed = {"on": False}

    def script(r: Received) -> Reply:
        return Reply(200) if healed["on"] or r.key != "bad" else Reply(422)

    endpoint.script = script
    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        topic = f"ops-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 2)
        api = httpx.Client(
            base_url=s["portal_url"], headers={"Authorization": f"Bearer {s['admin_token']}"}, timeout=60
        )
        doc = {"name": "ops", "topics": [topic], "endpoint": {"url": endpoint.url}}
        assert api.post("/api/v1/subscriptions", json=doc).status_code == 201
        produce(
            s["kafka_bootstrap"],
            topic,
            [(b"bad", b"poison", 0)] + [(f"k{i}".encode(), b"ok", i % 2) for i in range(20)],
        )

        def status() -> dict[int, dict]:  # type: ignore[type-arg]
            return {
                p["partition"]: p
                for p in api.get("/api/v1/subscriptions/ops/status").json()["partitions"]
                if p["topic"] == topic
            }

        def settled() -> dict[int, dict] | None:  # type: ignore[type-arg]
            # Counters come from the worker's live figures (published every second), so wait for them too.
            st = status()
            done = st[0]["committed"] == 11 and st[1]["committed"] == 10 and st[0]["dead_lettered"] == 1
            return st if done else None

        st = until(settled, timeout_s=60, what="everything acknowledged (the poison record dead-lettered)")
        assert st[0]["lag"] == 0 and st[0]["high_watermark"] == 11
        assert st[0]["stalled_s"] == 0.0  # the worker's live figure: nothing held once all is settled
        assert st[0]["worker"] == "worker-1"

        dl = until(
            lambda: api.get("/api/v1/subscriptions/ops/dead-letters?limit=10").json()["dead_letters"],
            timeout_s=15,
            what="the dead letter is listed",
        )
        assert len(dl) == 1
        d = dl[0]
        assert (d["key"], base64.b64decode(d["value"])) == ("bad", b"poison")
        assert (d["source_topic"], d["source_partition"], d["source_offset"], d["attempts"]) == (topic, 0, 0, 1)
        assert "422" in d["error"]
        assert api.get("/api/v1/subscriptions/ops/dead-letters?limit=0").status_code == 400

        healed["on"] = True
        r = api.post("/api/v1/subscriptions/ops/dead-letters/replay", json={})
        assert r.status_code == 200 and r.json() == {"replayed": 1, "already_redriven": 0, "retry_topic": "ops.retry"}
        bad = [
            x
            for x in endpoint.wait_for(
                lambda rs: any(x.key == "bad" and x.status == 200 for x in rs),
                timeout_s=60,
                what="the redriven record through ops.retry",
            )
            if x.key == "bad"
        ]
        # Pushed exactly as the first time, attempt 1 again: its original ce-id (an endpoint
        # deduplicating on it knows it), place and time, and none of the dead letter's ferry-*.
        assert [x.status for x in bad] == [422, 200]
        assert bad[1].headers == bad[0].headers and bad[1].ce_id == f"{topic}/0/0"
        assert bad[1].headers["ce-kafkatopic"] == topic
        # Redrive is once per dead letter: again answers 0, and the list says it was redriven.
        again = api.post("/api/v1/subscriptions/ops/dead-letters/replay", json={})
        assert again.json() == {"replayed": 0, "already_redriven": 1, "retry_topic": "ops.retry"}
        assert [d["redriven"] for d in api.get("/api/v1/subscriptions/ops/dead-letters").json()["dead_letters"]] == [
            True
        ]

        n_before = len(endpoint.snapshot())
        r = api.post("/api/v1/subscriptions/ops/reset", json={"to": "earliest"})
        assert r.status_code == 200, r.text
        assert {(p["topic"], p["committed"]) for p in r.json()["partitions"] if p["topic"] == topic} == {(topic, 0)}
        assert api.get("/api/v1/subscriptions/ops").json()["state"] == "active"
        endpoint.wait_for(
            lambda rs: len(rs) >= n_before + 21, timeout_s=60, what="everything delivered again after reset"
        )
        assert api.post("/api/v1/subscriptions/ops/reset", json={"to": "yesterday"}).status_code == 400
