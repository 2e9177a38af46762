"""Secrets never leak: endpoint header values, tokens and Kafka SASL settings appear in no log,
API response, metrics page or error message of a running stack."""

from __future__ import annotations

import json
import secrets
import urllib.request
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient

from ferry import zkpaths
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.stack import DevStack

pytestmark = pytest.mark.integration


def test_no_secret_in_logs_responses_or_metrics(
    tmp_path: Path, endpoint: EndpointRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = "admin-" + secrets.token_hex(8)
    sasl = "sasl-" + secrets.token_hex(8)
    header = "hdr-" + secrets.token_hex(8)
    monkeypatch.setenv("FERRY_ADMIN_TOKEN", admin)
    monkeypatch.setenv("FERRY_KAFKA_CONFIG", json.dumps({"sasl.password": sasl}))
    captured: list[str] = []
    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        api = httpx.Client(base_url=s["portal_url"], headers={"Authorization": f"Bearer {admin}"}, timeout=30)
        topic = f"sec-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 1)
        doc = {
            "name": "sec",
            "topics": [topic],
            "endpoint": {"url": endpoint.url, "headers": {"Authorization": f"Bearer {header}"}},
        }
        r = api.post("/api/v1/subscriptions", json=doc)
        assert r.status_code == 201
        captured.append(r.text)
        produce(s["kafka_bootstrap"], topic, [(b"k", b"v", 0)] * 5)
        endpoint.wait_for(lambda rs: len(rs) >= 5, timeout_s=60, what="delivery with the secret header")
        assert all(x.headers["authorization"] == f"Bearer {header}" for x in endpoint.snapshot())
        # Bad input whose error could echo a secret.
        bad = {**doc, "name": "sec2", "endpoint": {"url": endpoint.url, "headers": {"X-Key": header + "\n"}}}
        captured.append(api.post("/api/v1/subscriptions", json=bad).text)
        captured.append(api.put("/api/v1/subscriptions/sec", json={**doc, "max_in_flight": 0}).text)
        tok = api.post("/api/v1/tokens", json={"name": "reader", "scope": "read"}).json()["token"]
        for path in [
            "/api/v1/subscriptions",
            "/api/v1/subscriptions/sec",
            "/api/v1/subscriptions/sec/status",
            "/api/v1/subscriptions/sec/dead-letters",
            "/api/v1/workers",
            "/api/v1/tokens",
            "/api/v1/audit",
            "/api/v1/openapi.json",
            "/metrics",
        ]:
            captured.append(api.get(path).text)
        zk = KazooClient(hosts=s["zk_connect"])
        zk.start(15)
        try:
            wid = zk.get_children(zkpaths.workers(s["cluster"]))[0]
            metrics_url = json.loads(zk.get(zkpaths.worker(s["cluster"], wid))[0])["metrics_url"]
        finally:
            zk.stop()
            zk.close()
        for path in ("/metrics", "/stats"):
            with urllib.request.urlopen(metrics_url + path, timeout=5) as resp:
                captured.append(resp.read().decode())
        logs_dir = stack.dir / "logs"
    logs = {p.name: p.read_text(errors="replace") for p in logs_dir.glob("*.log")}
    assert logs, "the stack wrote no logs"
    for name, text in {**{f"response {i}": c for i, c in enumerate(captured)}, **logs}.items():
        for secret in (admin, sasl, header, tok):
            assert secret not in text, f"a secret leaked into {name}"
