"""The gateway's router: every path and method of the API, and what is not one (404, 405)."""

from __future__ import annotations

import pytest

from ferry.gateway import app
from ferry.gateway.httpmsg import HttpError
from ferry.gateway.openapi import OPENAPI

ROUTES = [
    ("POST", "/api/v1/topics/orders/records", app.produce_records, "orders"),
    ("POST", "/api/v1/topics/a.b-c_d/records", app.produce_records, "a.b-c_d"),
    ("POST", "/api/v1/topics/a/b/records", app.produce_records, "a/b"),  # refused by the handler: 400 topic
    ("POST", "/api/v1/topics/records/records", app.produce_records, "records"),
    ("POST", "/v1/kafka/send", app.seed_send, ""),
    ("POST", "/v1/kafka/send/", app.seed_send, ""),  # as the seed (Spring MVC) took it
    ("POST", "/api/v1/transactions", app.txn_prepare, ""),
    ("GET", "/api/v1/transactions/3.17.00ff00ff00ff00ff", app.txn_get, "3.17.00ff00ff00ff00ff"),
    ("POST", "/api/v1/transactions/3.17.00ff00ff00ff00ff/commit", app.txn_commit, "3.17.00ff00ff00ff00ff"),
    ("POST", "/api/v1/transactions/x/rollback", app.txn_rollback, "x"),
    ("GET", "/healthz", app.healthz, ""),
    ("HEAD", "/healthz", app.healthz, ""),
    ("GET", "/metrics", app.metrics, ""),
    ("GET", "/api/v1/openapi.json", app.openapi, ""),
]


@pytest.mark.parametrize(("method", "path", "route", "param"), ROUTES)
def test_routes(method: str, path: str, route: app.Route, param: str) -> None:
    assert app._route(method, path) == (route, param)


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api/v1/topics//records",
        "/api/v1/topics/records",
        "/api/v1/topics/orders",
        "/api/v1/topics/orders/records/",
        "/api/v1/transactions/",
        "/api/v1/transactions/x/",
        "/api/v1/transactions/x/abort",
        "/api/v1/transactions/x/commit/again",
        "/healthz/",
        "/v1/kafka/send//",
        "/v1/kafka/send.json",
    ],
)
def test_unknown_paths_are_404(path: str) -> None:
    with pytest.raises(HttpError) as raised:
        app._route("POST", path)
    assert raised.value.status == 404


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/api/v1/topics/orders/records", {"POST"}),
        ("PUT", "/v1/kafka/send", {"POST"}),
        ("GET", "/v1/kafka/send/", {"POST"}),
        ("POST", "/healthz", {"GET", "HEAD"}),
        ("DELETE", "/api/v1/transactions/x", {"GET", "HEAD"}),
        ("GET", "/api/v1/transactions/x/commit", {"POST"}),
    ],
)
def test_wrong_methods_are_405_with_allow(method: str, path: str, allow: set[str]) -> None:
    with pytest.raises(HttpError) as raised:
        app._route(method, path)
    assert raised.value.status == 405
    assert set(raised.value.headers["Allow"].split(",")) == allow
    # the message says what to use instead, not only "Method Not Allowed"
    assert raised.value.message == f"{method} is not allowed on {path}; use {' or '.join(sorted(allow))}"


def test_a_404_names_the_path_and_the_routes_there_are() -> None:
    with pytest.raises(HttpError) as raised:
        app._route("POST", "/api/v1/topics/orders")  # the record route without its /records
    assert raised.value.status == 404
    message = raised.value.message
    assert message.startswith("no route /api/v1/topics/orders; the gateway's routes are ")
    assert "POST /api/v1/topics/{topic}/records" in message and "POST /v1/kafka/send" in message
    with pytest.raises(HttpError) as long_path:
        app._route("GET", "/" + "x" * 10_000)
    assert len(long_path.value.message) < 600  # a long path is cut, not echoed whole


def test_every_path_of_the_openapi_document_is_routed() -> None:
    for template, operations in OPENAPI["paths"].items():
        path = template.replace("{topic}", "orders").replace("{id}", "1.2.00ff00ff00ff00ff")
        for method in operations:
            route, _ = app._route(method.upper(), path)
            assert route is not None, (method, template)


@pytest.mark.parametrize(
    ("status", "field", "code"),
    [
        (404, "topic", 10005),  # the seed's TOPIC_NOT_EXIST
        (400, "headers.x-delay", 10011),  # DELAY_LEVEL_ERROR
        (400, "x-delay", 10011),
        (503, None, 10006),  # SEND_FAILED: nothing written
        (503, "Idempotency-Key", 10006),
        (504, None, 10006),  # not known to be written
        (400, "payload", 400),  # errors the seed did not have: the HTTP status
        (400, "topic", 400),
        (401, None, 401),
        (403, "topic", 403),
        (404, None, 404),  # no such route
        (413, None, 413),
    ],
)
def test_seed_route_error_codes(status: int, field: str | None, code: int) -> None:
    assert app.seed_code(status, field) == code
