"""The portal's security model end to end (docs/SECURITY.md): who may call which route, cross-site
requests, browser-facing headers, and endpoint URLs that try to reach what they must not.

The route list comes from the app's own router, so a new route fails here until it is classified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from ferry import config
from ferry.migrations import runner
from ferry.portal.app import LOGINS, create_app

pytestmark = pytest.mark.integration
ADMIN = "admin-security-token"

# Every route the portal registers, by (method, canonical path): who may call it.
#   open  - no token needed (health, metrics, the UI's files)
#   read  - a read token is enough
#   admin - a read token gets 403
OPEN, READ, ADMIN_ONLY = "open", "read", "admin"
ACCESS = {
    ("GET", "/healthz"): OPEN,
    ("GET", "/metrics"): OPEN,
    ("GET", "/"): OPEN,
    ("GET", "/static"): OPEN,
    ("GET", "/api/v1/subscriptions"): READ,
    ("POST", "/api/v1/subscriptions"): ADMIN_ONLY,
    ("GET", "/api/v1/subscriptions/{name}"): READ,
    ("PUT", "/api/v1/subscriptions/{name}"): ADMIN_ONLY,
    ("DELETE", "/api/v1/subscriptions/{name}"): ADMIN_ONLY,
    ("POST", "/api/v1/subscriptions/{name}/pause"): ADMIN_ONLY,
    ("POST", "/api/v1/subscriptions/{name}/resume"): ADMIN_ONLY,
    ("GET", "/api/v1/subscriptions/{name}/status"): READ,
    ("POST", "/api/v1/subscriptions/{name}/reset"): ADMIN_ONLY,
    ("GET", "/api/v1/subscriptions/{name}/dead-letters"): READ,
    ("POST", "/api/v1/subscriptions/{name}/dead-letters/replay"): ADMIN_ONLY,
    ("GET", "/api/v1/workers"): READ,
    ("GET", "/api/v1/health"): READ,
    ("GET", "/api/v1/subscriptions/{name}/history"): READ,
    ("GET", "/api/v1/delays"): READ,
    ("GET", "/api/v1/subscriptions/{name}/records/{topic}/{partition}/{offset}"): READ,
    ("GET", "/api/v1/transactions"): READ,
    ("GET", "/api/v1/openapi.json"): READ,
    ("GET", "/api/v1/tokens"): ADMIN_ONLY,
    ("POST", "/api/v1/tokens"): ADMIN_ONLY,
    ("DELETE", "/api/v1/tokens/{id}"): ADMIN_ONLY,
    ("GET", "/api/v1/audit"): ADMIN_ONLY,
}
MakeApi = Callable[..., Awaitable[TestClient]]


@pytest.fixture()
async def make_api(
    mariadb_url: str, zk_connect: str, kafka_bootstrap: str, cluster_name: str
) -> AsyncIterator[MakeApi]:
    runner.upgrade(mariadb_url)
    clients: list[TestClient] = []

    async def make(**env: str) -> TestClient:
        settings = config.load(
            env={
                "FERRY_DB_URL": mariadb_url,
                "FERRY_ZK_CONNECT": zk_connect,
                "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
                "FERRY_CLUSTER": cluster_name,
                "FERRY_ADMIN_TOKEN": ADMIN,
                **env,
            }
        )
        client = TestClient(TestServer(create_app(settings)))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for c in clients:
        await c.close()


@pytest.fixture()
async def api(make_api: MakeApi) -> TestClient:
    client = await make_api()
    client.server.app[LOGINS].limit = 100_000  # these tests send many wrong tokens on purpose
    return client


def auth(value: str | None) -> dict[str, str]:
    return {"Authorization": value} if value is not None else {}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def registered_routes(app: web.Application) -> list[tuple[str, str]]:
    """(method, canonical path) of every route; HEAD is covered by its GET."""
    return sorted(
        {(r.method, r.resource.canonical) for r in app.router.routes() if r.resource is not None and r.method != "HEAD"}
    )


def concrete(path: str, name: str, token_id: int) -> str:
    if path == "/static":
        return "/static/app.js"
    return path.replace("{name}", name).replace("{id}", str(token_id))


async def _tokens(api: TestClient) -> tuple[str, str, int]:
    r = await api.post("/api/v1/tokens", json={"name": "reader", "scope": "read"}, headers=bearer(ADMIN))
    reader = (await r.json())["token"]
    r = await api.post("/api/v1/tokens", json={"name": "gone", "scope": "admin"}, headers=bearer(ADMIN))
    revoked = (await r.json())["token"]
    tokens = (await (await api.get("/api/v1/tokens", headers=bearer(ADMIN))).json())["tokens"]
    gone_id = next(t["id"] for t in tokens if t["name"] == "gone")
    assert (await api.delete(f"/api/v1/tokens/{gone_id}", headers=bearer(ADMIN))).status == 204
    assert (await api.get("/api/v1/subscriptions", headers=bearer(revoked))).status == 401
    return reader, revoked, gone_id


def _sub(name: str, url: str = "http://127.0.0.1:9/hook") -> dict[str, Any]:
    return {"name": name, "topics": ["orders"], "endpoint": {"url": url}}


async def test_every_route_is_classified_and_enforced(api: TestClient) -> None:
    routes = registered_routes(api.server.app)
    unclassified = [r for r in routes if r not in ACCESS]
    assert not unclassified, f"classify these routes in ACCESS (and docs/SECURITY.md): {unclassified}"
    assert not [r for r in ACCESS if r not in routes], "ACCESS names routes the portal no longer has"
    reader, revoked, revoked_id = await _tokens(api)
    assert (await api.post("/api/v1/subscriptions", json=_sub("auth-x"), headers=bearer(ADMIN))).status == 201
    bad_credentials = [
        None,
        "",
        "Bearer",
        "Bearer    ",
        "Basic YWRtaW46c2VjcmV0",
        f"Token {ADMIN}",
        f"{ADMIN}",
        f"Bearer {ADMIN}x",
        f"Bearer {ADMIN[:-1]}",
        f"Bearer {ADMIN.upper()}",
        "Bearer wrong",
        f"Bearer {revoked}",
    ]
    for method, path in routes:
        access = ACCESS[(method, path)]
        url = concrete(path, "auth-x", revoked_id)
        methods = [method, "HEAD"] if method == "GET" else [method]
        for m in methods:
            if access == OPEN:
                r = await api.request(m, url)
                assert r.status == 200, (m, url, r.status)
                continue
            for credential in bad_credentials:
                r = await api.request(m, url, headers=auth(credential), json={})
                assert r.status == 401, (m, url, credential, r.status)
            r = await api.request(m, url, headers=bearer(reader), json={})
            if access == ADMIN_ONLY:
                assert r.status == 403, (m, url, r.status)
            else:
                assert r.status in (200, 404), (m, url, r.status)
    # Admin may call everything (on names that do not exist, so nothing is destroyed).
    for method, path in routes:
        url = concrete(path, "no-such-sub", 999_999)
        r = await api.request(method, url, headers=bearer(ADMIN), json={})
        assert r.status not in (401, 403, 500), (method, url, r.status)
    assert (await api.get("/api/v1/subscriptions/auth-x", headers=bearer(reader))).status == 200
    # Paths the router does not know: under /api nothing is told without a token.
    assert (await api.get("/api/v1/no-such-route")).status == 401
    assert (await api.get("/api/v1/no-such-route", headers=bearer(ADMIN))).status == 404
    assert (await api.get("/no-such-page")).status == 404


async def test_cross_site_writes_are_refused_before_anything_happens(api: TestClient) -> None:
    assert (await api.post("/api/v1/subscriptions", json=_sub("csrf-x"), headers=bearer(ADMIN))).status == 201
    host = f"{api.host}:{api.port}"
    writes = [(m, p) for (m, p), _ in ACCESS.items() if m not in ("GET", "HEAD")]
    assert writes
    for method, path in writes:
        url = concrete(path, "csrf-x", 1)
        for browser in (
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Origin": f"http://{api.host}:{api.port + 1}"},
        ):
            r = await api.request(method, url, headers={**bearer(ADMIN), **browser}, json={})
            assert r.status == 403, (method, url, browser, r.status)
            assert "cross-site" in (await r.json())["error"]
    r = await api.get("/api/v1/subscriptions/csrf-x", headers=bearer(ADMIN))
    assert r.status == 200 and (await r.json())["state"] == "active", "a refused request changed something"
    # The portal's own pages (same origin) and non-browser clients may write.
    for same in ({"Sec-Fetch-Site": "same-origin", "Origin": f"http://{host}"}, {"Origin": f"http://{host}"}, {}):
        r = await api.post("/api/v1/subscriptions/csrf-x/pause", headers={**bearer(ADMIN), **same})
        assert r.status == 200, (same, r.status)
    # Reads stay possible from anywhere the token is (a cross-site page cannot get the token).
    r = await api.get("/api/v1/subscriptions", headers={**bearer(ADMIN), "Sec-Fetch-Site": "cross-site"})
    assert r.status == 200


async def test_no_cors_for_any_origin(api: TestClient) -> None:
    preflight = {
        "Origin": "https://evil.example",
        "Access-Control-Request-Method": "DELETE",
        "Access-Control-Request-Headers": "authorization",
    }
    r = await api.options("/api/v1/subscriptions/x", headers=preflight)
    assert not 200 <= r.status < 300, r.status
    for path in ("/api/v1/subscriptions", "/", "/healthz"):
        r = await api.get(path, headers={**bearer(ADMIN), "Origin": "https://evil.example"})
        assert not [h for h in r.headers if h.lower().startswith("access-control-")], (path, dict(r.headers))
    assert "Set-Cookie" not in r.headers


@pytest.mark.parametrize(
    ("path", "status", "content_type"),
    [
        ("/", 200, "text/html"),
        ("/static/app.js", 200, "javascript"),
        ("/static/style.css", 200, "text/css"),
        ("/static/no-such-file.js", 404, ""),
        ("/static/%2e%2e/app.py", 404, ""),  # no way out of the static folder
        ("/static/", 403, ""),  # no directory listing
        ("/api/v1/subscriptions", 200, "application/json"),
    ],
)
async def test_browser_facing_headers(api: TestClient, path: str, status: int, content_type: str) -> None:
    r = await api.get(path, headers=bearer(ADMIN))
    assert r.status == status
    assert content_type in r.headers["Content-Type"]
    csp = r.headers["Content-Security-Policy"]
    for directive in ("default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"):
        assert directive in csp, (path, csp)
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    assert "Set-Cookie" not in r.headers


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://2852039166/latest/meta-data", "metadata"),
        ("http://0251.0376.0251.0376/", "metadata"),
        ("http://0xa9fea9fe/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://0/", "unspecified"),
        ("http://0.0.0.0:8080/", "unspecified"),
        ("http://169.254.0.1/", "link-local"),
    ],
)
async def test_address_spellings_are_refused_at_registration(api: TestClient, url: str, why: str) -> None:
    r = await api.post("/api/v1/subscriptions", json=_sub("ssrf-spell", url), headers=bearer(ADMIN))
    assert r.status == 400
    body = await r.json()
    assert body["field"] == "endpoint.url" and why in body["error"], body


async def test_allow_list_refuses_private_ranges_outside_it(make_api: MakeApi) -> None:
    api = await make_api(FERRY_ENDPOINT_ALLOW="10.0.0.0/8")
    r = await api.post("/api/v1/subscriptions", json=_sub("allow-a", "http://127.0.0.1:9/"), headers=bearer(ADMIN))
    assert r.status == 400 and "FERRY_ENDPOINT_ALLOW" in (await r.json())["error"]
    r = await api.post("/api/v1/subscriptions", json=_sub("allow-b", "http://10.1.2.3:9/"), headers=bearer(ADMIN))
    assert r.status == 201, await r.text()
