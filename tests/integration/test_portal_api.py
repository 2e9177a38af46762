"""The portal REST API (docs/contract.md §3) against MariaDB, real ZooKeeper and the broker."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from openapi_spec_validator import validate

from ferry import config
from ferry.migrations import runner
from ferry.portal.app import create_app

pytestmark = pytest.mark.integration
ADMIN = "admin-secret-token"


@pytest.fixture()
async def api(mariadb_url: str, zk_connect: str, kafka_bootstrap: str, cluster_name: str) -> AsyncIterator[TestClient]:
    runner.upgrade(mariadb_url)
    settings = config.load(
        env={
            "FERRY_DB_URL": mariadb_url,
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "FERRY_CLUSTER": cluster_name,
            "FERRY_ADMIN_TOKEN": ADMIN,
            "FERRY_MAX_BODY_BYTES": "65536",
        }
    )
    client = TestClient(TestServer(create_app(settings)))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def h(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def sub(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "topics": ["orders"], "endpoint": {"url": "http://127.0.0.1:9/hook"}, **extra}


async def test_crud_and_errors(api: TestClient) -> None:
    r = await api.post(
        "/api/v1/subscriptions",
        json=sub("crud-a", endpoint={"url": "http://127.0.0.1:9/h", "headers": {"Authorization": "Bearer top-secret"}}),
        headers=h(ADMIN),
    )
    assert r.status == 201, await r.text()
    doc = await r.json()
    assert doc["endpoint"]["headers"] == {"Authorization": "***"}
    assert doc["ordering"] == "key" and doc["max_in_flight"] == 100 and doc["state"] == "active"
    assert (
        r.headers["X-Content-Type-Options"] == "nosniff"
        and "frame-ancestors 'none'" in r.headers["Content-Security-Policy"]
    )

    r = await api.post("/api/v1/subscriptions", json=sub("crud-a"), headers=h(ADMIN))
    assert r.status == 409 and (await r.json())["field"] == "name"

    for body, field in [
        ({"name": "x"}, "topics"),
        (sub("crud-b", endpoint={"url": "ftp://x/"}), "endpoint.url"),
        (sub("crud-b", retry={"max_attempts": 0}), "retry.max_attempts"),
        (sub("Bad Name"), "name"),
        ([1, 2], "body"),
    ]:
        r = await api.post("/api/v1/subscriptions", json=body, headers=h(ADMIN))
        assert r.status == 400, body
        assert (await r.json())["field"] == field
    r = await api.post(
        "/api/v1/subscriptions", data=b"{not json", headers={**h(ADMIN), "Content-Type": "application/json"}
    )
    assert r.status == 400 and (await r.json())["field"] == "body"
    r = await api.post("/api/v1/subscriptions", data=b"x" * 70000, headers=h(ADMIN))
    assert r.status == 413
    # it names the setting to change, as the gateway's 413 does
    assert (await r.json())["error"].startswith("the body is over FERRY_MAX_BODY_BYTES (65,536 bytes)")

    r = await api.get("/api/v1/subscriptions/nope", headers=h(ADMIN))
    assert r.status == 404
    # Edit with the masked value sent back: the secret is kept; the name cannot change.
    edited = {**doc, "max_in_flight": 7}
    r = await api.put("/api/v1/subscriptions/crud-a", json=edited, headers=h(ADMIN))
    assert r.status == 200 and (await r.json())["max_in_flight"] == 7
    r = await api.put("/api/v1/subscriptions/crud-a", json={**edited, "name": "other"}, headers=h(ADMIN))
    assert r.status == 400 and (await r.json())["field"] == "name"
    r = await api.post("/api/v1/subscriptions/crud-a/pause", headers=h(ADMIN))
    assert (await r.json())["state"] == "paused"
    r = await api.post("/api/v1/subscriptions/crud-a/resume", headers=h(ADMIN))
    assert (await r.json())["state"] == "active"
    r = await api.get("/api/v1/subscriptions", headers=h(ADMIN))
    listed = {s["name"]: s for s in (await r.json())["subscriptions"]}
    assert listed["crud-a"]["endpoint"]["headers"] == {"Authorization": "***"}
    assert "top-secret" not in json.dumps(listed)
    r = await api.get("/api/v1/audit", headers=h(ADMIN))
    entries = (await r.json())["entries"]
    assert {"subscription.create", "subscription.update", "subscription.pause"} <= {e["action"] for e in entries}
    assert "top-secret" not in json.dumps(entries)
    r = await api.delete("/api/v1/subscriptions/crud-a", headers=h(ADMIN))
    assert r.status == 204
    r = await api.get("/api/v1/subscriptions/crud-a", headers=h(ADMIN))
    assert r.status == 404


async def test_a_wrong_path_or_method_says_what_to_use(api: TestClient) -> None:
    r = await api.get("/api/v1/subscription", headers=h(ADMIN))  # a typo of /subscriptions
    assert r.status == 404
    assert await r.json() == {
        "error": "no route /api/v1/subscription; GET /api/v1/openapi.json lists the API's routes",
        "field": None,
    }
    r = await api.put("/api/v1/tokens", headers=h(ADMIN), json={})
    assert r.status == 405 and set(r.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}
    assert await r.json() == {"error": "PUT is not allowed on /api/v1/tokens; use GET or HEAD or POST", "field": None}


async def test_batch_option_is_accepted_returned_and_cleared(api: TestClient) -> None:
    r = await api.post("/api/v1/subscriptions", json=sub("batch-a", batch={"max_records": 500}), headers=h(ADMIN))
    assert r.status == 201, await r.text()
    doc = await r.json()
    assert doc["batch"] == {"max_records": 500, "max_bytes": 1048576, "linger_ms": 0}
    r = await api.get("/api/v1/subscriptions/batch-a", headers=h(ADMIN))
    assert (await r.json())["batch"] == doc["batch"]
    for batch, field in [({"max_records": 0}, "batch.max_records"), ({"linger": 1}, "batch.linger"), (3, "batch")]:
        r = await api.put("/api/v1/subscriptions/batch-a", json={**doc, "batch": batch}, headers=h(ADMIN))
        assert r.status == 400 and (await r.json())["field"] == field, batch
    r = await api.put("/api/v1/subscriptions/batch-a", json={**doc, "batch": None}, headers=h(ADMIN))
    assert r.status == 200 and "batch" not in await r.json()  # back to one record per POST
    r = await api.get("/api/v1/subscriptions/batch-a", headers=h(ADMIN))
    assert "batch" not in await r.json()
    await api.delete("/api/v1/subscriptions/batch-a", headers=h(ADMIN))


ROUTES = [
    ("GET", "/api/v1/subscriptions", False),
    ("POST", "/api/v1/subscriptions", True),
    ("GET", "/api/v1/subscriptions/auth-x", False),
    ("PUT", "/api/v1/subscriptions/auth-x", True),
    ("DELETE", "/api/v1/subscriptions/auth-x", True),
    ("POST", "/api/v1/subscriptions/auth-x/pause", True),
    ("POST", "/api/v1/subscriptions/auth-x/resume", True),
    ("GET", "/api/v1/subscriptions/auth-x/status", False),
    ("POST", "/api/v1/subscriptions/auth-x/reset", True),
    ("GET", "/api/v1/subscriptions/auth-x/dead-letters", False),
    ("POST", "/api/v1/subscriptions/auth-x/dead-letters/replay", True),
    ("GET", "/api/v1/workers", False),
    ("GET", "/api/v1/openapi.json", False),
    ("GET", "/api/v1/tokens", True),
    ("POST", "/api/v1/tokens", True),
    ("GET", "/api/v1/audit", True),
]


# The auth matrix over every registered route: tests/integration/test_portal_security.py.


async def test_wrong_tokens_are_rate_limited(api: TestClient) -> None:
    for i in range(10):
        assert (await api.get("/api/v1/subscriptions", headers=h("guess"))).status == 401
        if i == 4:  # a right token from the same address (a poller, a proxy) clears nothing
            assert (await api.get("/api/v1/subscriptions", headers=h(ADMIN))).status == 200
    r = await api.get("/api/v1/subscriptions", headers=h("guess"))
    assert r.status == 429 and int(r.headers["Retry-After"]) > 0
    # Blocked means blocked: even a right token waits, so guessing cannot continue in between.
    assert (await api.get("/api/v1/subscriptions", headers=h(ADMIN))).status == 429
    assert (await api.get("/healthz")).status == 200


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://[fe80::1]/hook", "link-local"),
        ("http://metadata.ssrf.test/hook", "link-local"),
    ],
)
async def test_ssrf_refused(api: TestClient, monkeypatch: pytest.MonkeyPatch, url: str, why: str) -> None:
    real = socket.getaddrinfo

    def fake(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "metadata.ssrf.test":  # a name whose DNS answer is link-local
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.10.10", 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    r = await api.post("/api/v1/subscriptions", json=sub("ssrf", endpoint={"url": url}), headers=h(ADMIN))
    assert r.status == 400
    body = await r.json()
    assert body["field"] == "endpoint.url" and why in body["error"]


async def test_openapi_is_valid_and_covers_every_route(api: TestClient) -> None:
    r = await api.get("/api/v1/openapi.json", headers=h(ADMIN))
    doc = await r.json()
    validate(doc)
    paths = set(doc["paths"])
    for _, path, _ in ROUTES:
        assert path.replace("auth-x", "{name}") in paths
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    registered = {
        (r.method, r.resource.canonical)
        for r in api.server.app.router.routes()
        if r.resource is not None and r.method not in ("HEAD", "OPTIONS")
    }
    ui = {("GET", "/"), ("GET", "/static"), ("GET", "/metrics")}  # not JSON API
    assert registered - ui == documented
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if op.get("security") != []:
                assert {"401", "403"} <= set(op["responses"]), (method, path)  # produce tokens get 403


async def test_dry_run_checks_everything_and_stores_nothing(api: TestClient) -> None:
    r = await api.post("/api/v1/subscriptions?dry_run=true", json=sub("dry-a"), headers=h(ADMIN))
    assert r.status == 200 and (await r.json())["name"] == "dry-a"
    assert (await api.get("/api/v1/subscriptions/dry-a", headers=h(ADMIN))).status == 404
    r = await api.post("/api/v1/subscriptions?dry_run=true", json=sub("dry-a", clusters=["dc9"]), headers=h(ADMIN))
    assert r.status == 400 and (await r.json())["field"] == "clusters[0]"
    r = await api.post("/api/v1/subscriptions?dry_run=maybe", json=sub("dry-a"), headers=h(ADMIN))
    assert r.status == 400 and (await r.json())["field"] == "dry_run"
    assert (await api.post("/api/v1/subscriptions", json=sub("dry-a"), headers=h(ADMIN))).status == 201
    r = await api.post("/api/v1/subscriptions?dry_run=true", json=sub("dry-a"), headers=h(ADMIN))
    assert r.status == 409  # as the real create would answer
    changed = sub("dry-a", topics=["payments"])
    r = await api.put("/api/v1/subscriptions/dry-a?dry_run=1", json=changed, headers=h(ADMIN))
    assert r.status == 200 and (await r.json())["topics"] == ["payments"]
    r = await api.get("/api/v1/subscriptions/dry-a", headers=h(ADMIN))
    assert (await r.json())["topics"] == ["orders"]
    r = await api.put("/api/v1/subscriptions/dry-none?dry_run=true", json=sub("dry-none"), headers=h(ADMIN))
    assert r.status == 404
    r = await api.post("/api/v1/subscriptions?dry_run=true", json=sub("dry-b"), headers=h("wrong"))
    assert r.status == 401
    r = await api.get("/api/v1/audit", headers=h(ADMIN))
    dry = [(e["action"], e["target"]) for e in (await r.json())["entries"] if e["target"].startswith("dry-")]
    assert ("subscription.create", "dry-a") in dry
    assert not [e for e in dry if e[1] != "dry-a" or e[0] == "subscription.update"]  # dry runs are not audited
    assert (await api.delete("/api/v1/subscriptions/dry-a", headers=h(ADMIN))).status == 204


async def test_cesql_filters_through_the_api(api: TestClient) -> None:
    """The CESQL forms a user writes first: NOT before a bracket is the keyword, not a function;
    a call with the wrong number of arguments is refused when saved, naming the function."""
    ok = sub("cesql-a", filter={"sql": "NOT (kafkapartition IN (0, 1)) AND NOT(type = 'x')"})
    assert (await api.post("/api/v1/subscriptions?dry_run=true", json=ok, headers=h(ADMIN))).status == 200
    bad = sub("cesql-b", filter={"sql": "LENGTH(subject, 2) > 1"})
    r = await api.post("/api/v1/subscriptions?dry_run=true", json=bad, headers=h(ADMIN))
    answer = await r.json()
    assert r.status == 400 and answer["field"] == "filter.sql" and "LENGTH" in answer["error"], answer


async def test_numbers_in_non_ascii_digits_are_refused_not_a_500(api: TestClient) -> None:
    # str.isdigit() takes "²", which int() refuses: each of these answered 500.
    r = await api.post("/api/v1/subscriptions", json=sub("digits-a"), headers=h(ADMIN))
    assert r.status == 201, await r.text()
    for path, status, field in [
        ("/api/v1/subscriptions/digits-a/dead-letters?limit=%C2%B2", 400, "limit"),
        ("/api/v1/subscriptions/digits-a/records/orders/%C2%B2/1", 400, "partition"),
        ("/api/v1/subscriptions/digits-a/records/orders/0/%C2%B2", 400, "offset"),
        ("/api/v1/audit?limit=%C2%B2", 400, "limit"),
    ]:
        r = await api.get(path, headers=h(ADMIN))
        assert r.status == status, (path, await r.text())
        assert (await r.json())["field"] == field, path
    r = await api.delete("/api/v1/tokens/%C2%B2", headers=h(ADMIN))
    assert r.status == 404 and (await r.json())["field"] == "id"


async def test_replay_refuses_a_body_that_is_not_an_object(api: TestClient) -> None:
    # A JSON array, number or string was taken as "no options" and redrove up to 1000 dead letters.
    r = await api.post("/api/v1/subscriptions", json=sub("replay-body"), headers=h(ADMIN))
    assert r.status == 201, await r.text()
    for raw in (b"[]", b'[{"limit": 1}]', b"5", b'"limit"', b"null"):
        r = await api.post(
            "/api/v1/subscriptions/replay-body/dead-letters/replay",
            data=raw,
            headers={**h(ADMIN), "Content-Type": "application/json"},
        )
        assert r.status == 400, (raw, await r.text())
        assert (await r.json())["field"] == "body"
    r = await api.get("/api/v1/audit", headers=h(ADMIN))
    entries = (await r.json())["entries"]
    assert not [e for e in entries if e["action"] == "dead_letters.replay" and e["target"] == "replay-body"]


async def test_a_body_nested_too_deeply_is_a_400(api: TestClient) -> None:
    # json.loads raises RecursionError (not ValueError) thousands of levels deep: it answered 500.
    deep = b"[" * 30000 + b"]" * 30000
    for method, path in [
        ("POST", "/api/v1/subscriptions"),
        ("PUT", "/api/v1/subscriptions/deep"),
        ("POST", "/api/v1/tokens"),
    ]:
        r = await api.request(method, path, data=deep, headers={**h(ADMIN), "Content-Type": "application/json"})
        assert r.status == 400, (path, await r.text())
        assert (await r.json())["field"] == "body"
    r = await api.get("/api/v1/subscriptions/deep", headers=h(ADMIN))
    assert r.status == 404
