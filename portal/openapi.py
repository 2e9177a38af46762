"""``GET /api/v1/openapi.json``: the OpenAPI 3.0 description of the portal API (validated in tests)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

ERROR = {"$ref": "#/components/responses/Error"}


def _op(
    summary: str,
    ok: dict[str, Any],
    *,
    body: str | None = None,
    params: list[str] | None = None,
    errors: tuple[int, ...] = (400, 401, 403, 404),
) -> dict[str, Any]:
    if 401 in errors and 403 not in errors:
        errors = (*errors, 403)  # a token of a scope this route does not take (e.g. produce)
    op: dict[str, Any] = {"summary": summary, "responses": {**ok, **{str(e): ERROR for e in errors}}}
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {"$ref": body}}}}
    if params:
        op["parameters"] = [{"$ref": f"#/components/parameters/{p}"} for p in params]
    return op


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


SUB = {"$ref": "#/components/schemas/Subscription"}
TOPIC = {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {
        "title": "Ferry portal API",
        "version": "1",
        "description": "Register and operate subscriptions of the Ferry Kafka consumer proxy. Every call but "
        "/healthz needs `Authorization: Bearer <token>`; writes need an admin token.",
    },
    "servers": [{"url": "/"}],
    "security": [{"bearer": []}],
    "paths": {
        "/healthz": {
            "get": {"summary": "Liveness", "security": [], "responses": {"200": _json("ok", {"type": "object"})}}
        },
        "/api/v1/subscriptions": {
            "get": _op(
                "List subscriptions",
                {
                    "200": _json(
                        "all",
                        {
                            "type": "object",
                            "required": ["subscriptions"],
                            "properties": {"subscriptions": {"type": "array", "items": SUB}},
                        },
                    )
                },
                errors=(401,),
            ),
            "post": _op(
                "Create a subscription",
                {"201": _json("stored", SUB), "200": _json("dry run: every check passed, nothing stored", SUB)},
                body="#/components/schemas/SubscriptionInput",
                params=["dry_run"],
                errors=(400, 401, 403, 409, 413),
            ),
        },
        "/api/v1/subscriptions/{name}": {
            "get": _op("Read a subscription", {"200": _json("stored", SUB)}, params=["name"], errors=(401, 404)),
            "put": _op(
                "Replace a subscription",
                {"200": _json("stored (with dry_run: checked, nothing stored)", SUB)},
                body="#/components/schemas/SubscriptionInput",
                params=["name", "dry_run"],
                errors=(400, 401, 403, 404, 413),
            ),
            "delete": _op(
                "Delete a subscription", {"204": {"description": "deleted"}}, params=["name"], errors=(401, 403, 404)
            ),
        },
        "/api/v1/subscriptions/{name}/pause": {
            "post": _op(
                "Pause delivery (offsets kept)", {"200": _json("stored", SUB)}, params=["name"], errors=(401, 403, 404)
            )
        },
        "/api/v1/subscriptions/{name}/resume": {
            "post": _op("Resume delivery", {"200": _json("stored", SUB)}, params=["name"], errors=(401, 403, 404))
        },
        "/api/v1/subscriptions/{name}/status": {
            "get": _op(
                "Per-partition status",
                {"200": _json("status", {"$ref": "#/components/schemas/Status"})},
                params=["name"],
                errors=(401, 404),
            )
        },
        "/api/v1/health": {
            "get": _op(
                "Every subscription's health badge and current rates (docs/ui.md)",
                {"200": _json("health", {"$ref": "#/components/schemas/Health"})},
                errors=(401,),
            )
        },
        "/api/v1/subscriptions/{name}/history": {
            "get": _op(
                "The last hour of lag and rates, total and per partition, as sampled by this portal",
                {"200": _json("history", {"$ref": "#/components/schemas/History"})},
                params=["name"],
                errors=(401, 404),
            )
        },
        "/api/v1/subscriptions/{name}/reset": {
            "post": _op(
                "Reset offsets (pause, rewrite with a new epoch, resume)",
                {"200": _json("done", {"type": "object"})},
                body="#/components/schemas/Reset",
                params=["name"],
                errors=(400, 401, 403, 404, 409),
            )
        },
        "/api/v1/subscriptions/{name}/dead-letters": {
            "get": _op(
                "Last dead letters",
                {
                    "200": _json(
                        "records",
                        {
                            "type": "object",
                            "required": ["dead_letters"],
                            "properties": {
                                "dead_letters": {"type": "array", "items": {"$ref": "#/components/schemas/DeadLetter"}}
                            },
                        },
                    )
                },
                params=["name", "limit", "cluster"],
                errors=(400, 401, 404),
            )
        },
        "/api/v1/subscriptions/{name}/records/{topic}/{partition}/{offset}": {
            "get": _op(
                "Where one record of the subscription is (record trace)",
                {"200": _json("trace", {"$ref": "#/components/schemas/Trace"})},
                params=["name", "topic", "partition", "offset", "cluster"],
                errors=(400, 401, 404, 503),
            )
        },
        "/api/v1/subscriptions/{name}/dead-letters/replay": {
            "post": _op(
                "Redrive dead letters through the subscription's retry topic",
                {
                    "200": _json(
                        "replayed",
                        {
                            "type": "object",
                            "properties": {"replayed": {"type": "integer"}, "retry_topic": {"type": "string"}},
                        },
                    )
                },
                params=["name"],
                errors=(400, 401, 403, 404),
            )
        },
        "/api/v1/workers": {
            "get": _op(
                "Live workers and their partitions",
                {
                    "200": _json(
                        "workers",
                        {
                            "type": "object",
                            "required": ["workers"],
                            "properties": {
                                "workers": {"type": "array", "items": {"$ref": "#/components/schemas/Worker"}}
                            },
                        },
                    )
                },
                errors=(401,),
            )
        },
        "/api/v1/delays": {
            "get": _op(
                "The delay store over the whole cluster: records scheduled, next due, p99 lateness",
                {
                    "200": _json(
                        "delays",
                        {
                            "type": "object",
                            "required": ["scheduled", "next_due", "late_p99_ms"],
                            "properties": {
                                "scheduled": {"type": "integer"},
                                "next_due": {"type": "integer", "nullable": True},
                                "late_p99_ms": {"type": "number", "nullable": True},
                            },
                        },
                    )
                },
                errors=(401,),
            )
        },
        "/api/v1/transactions": {
            "get": {
                **_op(
                    "Prepared transactions the back-check owners hold, oldest first, and the counters",
                    {"200": _json("transactions", {"type": "object", "required": ["transactions", "counters"]})},
                    errors=(400, 401),
                ),
                "parameters": [
                    {
                        "name": "state",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "enum": ["prepared"]},
                    }
                ],
            }
        },
        "/api/v1/tokens": {
            "get": _op("List API tokens (admin)", {"200": _json("tokens", {"type": "object"})}, errors=(401, 403)),
            "post": _op(
                "Create an API token (admin); the token is shown once",
                {"201": _json("created", {"type": "object"})},
                body="#/components/schemas/TokenInput",
                errors=(400, 401, 403),
            ),
        },
        "/api/v1/tokens/{id}": {
            "delete": _op(
                "Revoke a token (admin)", {"204": {"description": "revoked"}}, params=["id"], errors=(401, 403, 404)
            )
        },
        "/api/v1/audit": {
            "get": _op(
                "Audit log (admin)",
                {"200": _json("entries", {"type": "object"})},
                params=["limit"],
                errors=(400, 401, 403),
            )
        },
        "/api/v1/openapi.json": {
            "get": _op("This document", {"200": _json("OpenAPI 3", {"type": "object"})}, errors=(401,))
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "parameters": {
            "name": {
                "name": "name",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$"},
            },
            "id": {"name": "id", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}},
            "limit": {
                "name": "limit",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
            "dry_run": {
                "name": "dry_run",
                "in": "query",
                "required": False,
                "description": "true: run every check and answer what would be stored, storing nothing",
                "schema": {"type": "string", "enum": ["true", "false", "1", "0"], "default": "false"},
            },
            "cluster": {
                "name": "cluster",
                "in": "query",
                "required": False,
                "description": "the Kafka cluster (docs/zones.md); one the subscription reads",
                "schema": {"type": "string", "default": "default"},
            },
            "topic": {"name": "topic", "in": "path", "required": True, "schema": TOPIC},
            "partition": {
                "name": "partition",
                "in": "path",
                "required": True,
                "schema": {"type": "integer", "minimum": 0},
            },
            "offset": {"name": "offset", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 0}},
        },
        "responses": {
            "Error": _json(
                "error",
                {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}, "field": {"type": "string", "nullable": True}},
                },
            )
        },
        "schemas": {
            "Endpoint": {
                "type": "object",
                "required": ["url"],
                "additionalProperties": False,
                "properties": {
                    "url": {"type": "string", "format": "uri", "pattern": "^https?://", "maxLength": 2048},
                    "timeout_ms": {"type": "integer", "minimum": 100, "maximum": 600000, "default": 5000},
                    "headers": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "write-only secrets: shown as *** ; send *** back to keep a value",
                    },
                },
            },
            "Retry": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "max_attempts": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5},
                    "initial_backoff_ms": {"type": "integer", "minimum": 1, "default": 200},
                    "max_backoff_ms": {"type": "integer", "minimum": 1, "default": 30000},
                    "mode": {
                        "type": "string",
                        "enum": ["memory", "durable"],
                        "default": "memory",
                        "description": "durable: a record waiting for a retry waits in the delay store, not in "
                        "the partition's window (ordering none only; docs/delivery.md#durable-retries)",
                    },
                },
            },
            "Batch": {
                "type": "object",
                "nullable": True,
                "additionalProperties": False,
                "description": "batch push mode (docs/delivery.md): up to max_records records or max_bytes per POST "
                "as application/cloudevents-batch+json; absent or null: one record per POST",
                "properties": {
                    "max_records": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 100},
                    "max_bytes": {"type": "integer", "minimum": 1024, "maximum": 67108864, "default": 1048576},
                    "linger_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 0},
                },
            },
            "SubscriptionInput": {
                "type": "object",
                "required": ["name", "topics", "endpoint"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._-]{0,62}$"},
                    "topics": {"type": "array", "minItems": 1, "maxItems": 100, "uniqueItems": True, "items": TOPIC},
                    "endpoint": {"$ref": "#/components/schemas/Endpoint"},
                    "ordering": {"type": "string", "enum": ["key", "partition", "none"], "default": "key"},
                    "max_in_flight": {"type": "integer", "minimum": 1, "maximum": 10000, "default": 100},
                    "retry": {"$ref": "#/components/schemas/Retry"},
                    "dead_letter_topic": TOPIC,
                    "start_from": {"type": "string", "enum": ["earliest", "latest"], "default": "earliest"},
                    "state": {"type": "string", "enum": ["active", "paused"], "default": "active"},
                    "batch": {"$ref": "#/components/schemas/Batch"},
                    "filter": {
                        "type": "object",
                        "nullable": True,
                        "description": "which records are pushed (docs/filters.md); absent: every record",
                    },
                    "delay_ms": {"type": "integer", "minimum": 0, "maximum": 604800000, "default": 0},
                    "concurrency": {
                        "type": "object",
                        "nullable": True,
                        "additionalProperties": False,
                        "properties": {
                            "mode": {"type": "string", "enum": ["fixed", "adaptive"]},
                            "min": {"type": "integer", "minimum": 1, "maximum": 10000},
                            "max": {"type": "integer", "minimum": 1, "maximum": 10000},
                        },
                    },
                    "clusters": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 32,
                        "uniqueItems": True,
                        "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,39}$"},
                        "default": ["default"],
                        "description": "the Kafka clusters its topics are consumed from (FERRY_KAFKA_CLUSTERS,"
                        " docs/zones.md); each must be configured",
                    },
                },
            },
            "Subscription": {"allOf": [{"$ref": "#/components/schemas/SubscriptionInput"}]},
            "Reset": {
                "type": "object",
                "required": ["to"],
                "properties": {
                    "to": {
                        "oneOf": [{"type": "string", "enum": ["earliest", "latest"]}, {"type": "integer", "minimum": 0}]
                    },
                    "cluster": {"type": "string", "description": "only this Kafka cluster's partitions"},
                },
                "additionalProperties": False,
            },
            "PartitionStatus": {
                "type": "object",
                "properties": {
                    k: {"type": t, "nullable": True}
                    for k, t in [
                        ("topic", "string"),
                        ("partition", "integer"),
                        ("cluster", "string"),
                        ("worker", "string"),
                        ("committed", "integer"),
                        ("high_watermark", "integer"),
                        ("lag", "integer"),
                        ("stalled_s", "number"),
                        ("in_flight", "integer"),
                        ("delivered", "integer"),
                        ("retried", "integer"),
                        ("dead_lettered", "integer"),
                        ("filtered", "integer"),
                        ("deferred", "integer"),
                    ]
                },
            },
            "Status": {
                "type": "object",
                "required": ["name", "state", "partitions"],
                "properties": {
                    "name": {"type": "string"},
                    "state": {"type": "string"},
                    "partitions": {"type": "array", "items": {"$ref": "#/components/schemas/PartitionStatus"}},
                },
            },
            "HealthRow": {
                "type": "object",
                "required": ["name", "state", "health"],
                "properties": {
                    "name": {"type": "string"},
                    "state": {"type": "string", "enum": ["active", "paused"]},
                    "health": {"type": "string", "enum": ["ok", "lagging", "stalled", "failing", "paused", "unknown"]},
                    **{
                        k: {"type": t, "nullable": True}
                        for k, t in [
                            ("lag", "integer"),
                            ("delivered_per_s", "number"),
                            ("retried_per_s", "number"),
                            ("dead_lettered_per_s", "number"),
                            ("dead_lettered_1h", "integer"),
                            ("dead_lettered_1m", "integer"),
                            ("stalled_s", "number"),
                        ]
                    },
                },
            },
            "Health": {
                "type": "object",
                "required": ["interval_s", "subscriptions"],
                "properties": {
                    "interval_s": {"type": "number"},
                    "subscriptions": {"type": "array", "items": {"$ref": "#/components/schemas/HealthRow"}},
                },
            },
            "HistoryPoint": {
                "type": "object",
                "required": ["t", "lag"],
                "properties": {
                    "t": {"type": "integer", "description": "epoch ms"},
                    "lag": {"type": "integer"},
                    "delivered_per_s": {"type": "number"},
                    "retried_per_s": {"type": "number"},
                    "dead_lettered_per_s": {"type": "number"},
                    "stalled_s": {"type": "number"},
                },
            },
            "History": {
                "type": "object",
                "required": ["name", "interval_s", "span_s", "health", "points", "partitions"],
                "properties": {
                    "name": {"type": "string"},
                    "interval_s": {"type": "number"},
                    "span_s": {"type": "number"},
                    "health": {"type": "string"},
                    "points": {"type": "array", "items": {"$ref": "#/components/schemas/HistoryPoint"}},
                    "partitions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "topic": {"type": "string"},
                                "partition": {"type": "integer"},
                                "cluster": {"type": "string"},
                                "points": {"type": "array", "items": {"$ref": "#/components/schemas/HistoryPoint"}},
                            },
                        },
                    },
                },
            },
            "DeadLetter": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "nullable": True},
                    "value": {"type": "string", "format": "byte"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "error": {"type": "string", "nullable": True},
                    "attempts": {"type": "integer", "nullable": True},
                    "source_topic": {"type": "string", "nullable": True},
                    "source_partition": {"type": "integer", "nullable": True},
                    "source_offset": {"type": "integer", "nullable": True},
                    "timestamp": {"type": "integer"},
                    "cluster": {"type": "string", "description": "the Kafka cluster it is in"},
                    "redriven": {"type": "boolean", "description": "a replay already sent it to the retry topic"},
                },
            },
            "Trace": {
                "type": "object",
                "required": ["topic", "partition", "offset", "state", "cluster"],
                "properties": {
                    "topic": {"type": "string"},
                    "partition": {"type": "integer"},
                    "offset": {"type": "integer"},
                    "state": {
                        "type": "string",
                        "enum": [
                            "not_yet_fetched",
                            "in_flight",
                            "waiting_retry",
                            "delivered",
                            "dead_lettered",
                            "filtered",
                            "not_in_log",
                        ],
                    },
                    "attempts": {"type": "integer", "nullable": True},
                    "last_status": {"type": "integer", "nullable": True},
                    "last_error": {"type": "string", "nullable": True},
                    "worker": {"type": "string", "nullable": True},
                    "next_attempt_at": {"type": "integer", "nullable": True, "description": "epoch ms"},
                    "cluster": {"type": "string"},
                },
            },
            "Worker": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "host": {"type": "string", "nullable": True},
                    "since": {"type": "integer", "nullable": True},
                    "zone": {"type": "string", "description": "FERRY_ZONE of the worker (docs/zones.md)"},
                    "partitions": {"type": "array", "items": {"type": "object"}},
                    "internal_partitions": {"type": "integer", "description": "partitions of Ferry's own work"},
                },
            },
            "TokenInput": {
                "type": "object",
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "scope": {"type": "string", "enum": ["admin", "read", "produce"]},
                    "topics": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "produce tokens only: topic names or patterns (* matches any run of characters)",
                    },
                },
            },
        },
    },
}


async def openapi(_: web.Request) -> web.Response:
    return web.json_response(DOCUMENT)


def routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/openapi.json", openapi)
