"""The gateway's OpenAPI 3 document (``GET /api/v1/openapi.json``), written out so it reads as the
API's reference: every route, body, answer and error of docs/contract.md §9 and §11."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "field": {"type": ["string", "null"]}},
    "required": ["error"],
}
_HEADERS = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "propertyNames": {"minLength": 1, "maxLength": 255, "not": {"pattern": "^[Ff][Ee][Rr][Rr][Yy]-"}},
    "description": "record headers; names starting with ferry- (any letter case) are reserved for Ferry",
}
_RECORD = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "key": {"type": ["string", "null"]},
        "value": {"description": "any JSON; a string is written as its bare text, anything else as JSON text"},
        "value_b64": {"type": "string", "description": "raw bytes, base64 (not with value)"},
        "headers": _HEADERS,
        "partition": {"type": "integer", "minimum": 0},
        "delay_ms": {"type": "integer", "minimum": 1, "description": "deliver no earlier than now + delay_ms"},
        "deliver_at": {"type": "integer", "description": "deliver no earlier than this epoch ms"},
    },
}
_RESULT = {
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "partition": {"type": "integer"},
                "offset": {
                    "type": ["integer", "null"],
                    "description": "null: written, at an offset Kafka did not report (a retried write it had taken)",
                },
            },
        },
        {
            "type": "object",
            "properties": {
                "scheduled": {"const": True},
                "id": {"type": ["string", "null"]},
                "deliver_at": {"type": "integer"},
            },
        },
        _ERROR,
    ]
}


def _errors(*codes: int) -> dict[str, Any]:
    text = {
        400: "invalid input (field names it)",
        401: "missing, invalid or revoked token",
        403: "a read token, or a token that may not produce to the topic (a transaction: to one of its topics)",
        404: "unknown topic or transaction",
        409: "the transaction is already decided the other way, or the Idempotency-Key is in use",
        413: "body over FERRY_MAX_BODY_BYTES",
        422: "Idempotency-Key used before with another body",
        503: "Kafka cannot take records now and none was written (retry after Retry-After)",
        504: (
            "no record is known written and some may be: Kafka did not acknowledge them within "
            "FERRY_GATEWAY_PRODUCE_TIMEOUT_MS (with the same Idempotency-Key a retry answers this again)"
        ),
    }
    return {
        str(c): {
            "description": text[c],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
        }
        for c in codes
    }


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


_IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
    "description": "repeat within 24 h with the same body: the first answer, nothing written again",
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Ferry gateway", "version": "1", "description": "Produce to Kafka over HTTP (docs/gateway.md)."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Error": _ERROR, "Record": _RECORD, "Result": _RESULT},
    },
    "security": [{"bearer": []}],
    "paths": {
        "/api/v1/topics/{topic}/records": {
            "post": {
                "summary": "Write 1–10,000 records to a topic; 200 once every record is acknowledged (acks=all)",
                "parameters": [
                    {"name": "topic", "in": "path", "required": True, "schema": {"type": "string"}},
                    _IDEMPOTENCY,
                ],
                "requestBody": _json(
                    {
                        "type": "object",
                        "properties": {
                            "records": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 10000,
                                "items": {"$ref": "#/components/schemas/Record"},
                            }
                        },
                        "required": ["records"],
                    }
                ),
                "responses": {
                    "200": {
                        "description": "one result per record, in order",
                        **_json(
                            {
                                "type": "object",
                                "properties": {
                                    "results": {"type": "array", "items": {"$ref": "#/components/schemas/Result"}}
                                },
                            }
                        ),
                    },
                    **_errors(400, 401, 403, 404, 409, 413, 422, 503, 504),
                },
            }
        },
        "/v1/kafka/send": {
            "post": {
                "summary": "The seed producer proxy's API: one record; header x-delay (seconds) delays it",
                "parameters": [_IDEMPOTENCY],
                "requestBody": _json(
                    {
                        "type": "object",
                        "properties": {
                            "topic": {"type": "string"},
                            "payload": {"type": "string"},
                            "key": {"type": "string"},
                            "headers": _HEADERS,
                        },
                        "required": ["topic", "payload"],
                    }
                ),
                "responses": {
                    "200": {
                        "description": '{"code": 0, "message": "ok", "partition", "offset"} or scheduled, '
                        'with the seed\'s "msg": "send success" and "data": null'
                    },
                    "default": {"description": '{"code": <non-zero>, "message", "msg" (the same), "data": null}'},
                },
            }
        },
        "/v1/kafka/send_batch": {
            "post": {
                "summary": "The seed producer proxy's batch API: messages as /v1/kafka/send takes them",
                "parameters": [_IDEMPOTENCY],
                "requestBody": _json(
                    {
                        "type": "object",
                        "properties": {
                            "messages": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 10000,
                                "items": {"description": "a /v1/kafka/send body"},
                            }
                        },
                        "required": ["messages"],
                    }
                ),
                "responses": {
                    "200": {
                        "description": '{"code": 0, "msg": "batch send success", "results": [...]}, or code 10007 '
                        'with "data" the messages not written (send them again) and each one\'s error in "results"'
                    },
                    "default": {"description": '{"code": <non-zero>, "message" (naming messages[i]), "msg", "data"}'},
                },
            }
        },
        "/api/v1/transactions": {
            "post": {
                "summary": "Prepare a transaction: records durable and invisible until commit",
                "requestBody": _json(
                    {
                        "type": "object",
                        "properties": {
                            "records": {"type": "array", "items": {"$ref": "#/components/schemas/Record"}},
                            "check_url": {"type": "string", "format": "uri"},
                            "timeout_ms": {"type": "integer", "default": 60000},
                        },
                        "required": ["records", "check_url"],
                    }
                ),
                "responses": {
                    "201": {"description": '{"id", "state": "prepared"}'},
                    **_errors(400, 401, 403, 404, 503),
                },
            }
        },
        "/api/v1/transactions/{id}": {
            "get": {
                "summary": "A transaction's state and checks",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": '{"id", "state", "checks"}'}, **_errors(401, 403, 404, 503)},
            }
        },
        "/api/v1/transactions/{id}/commit": {
            "post": {
                "summary": "Commit: write the records (ferry-transaction-id/-seq); repeating answers the same",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": '{"id", "state": "committed", "results"}'},
                    **_errors(401, 403, 404, 409, 503),
                },
            }
        },
        "/api/v1/transactions/{id}/rollback": {
            "post": {
                "summary": "Roll back: nothing is ever written; repeating answers the same",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {
                    "200": {"description": '{"id", "state": "rolled_back"}'},
                    **_errors(401, 403, 404, 409, 503),
                },
            }
        },
        "/api/v1/requests/{key}": {
            "get": {
                "summary": "What became of this token's produce sent with this Idempotency-Key (no body needed)",
                "parameters": [
                    {
                        "name": "key",
                        "in": "path",
                        "required": True,
                        "description": "the Idempotency-Key, percent-encoded",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                    }
                ],
                "responses": {
                    "200": {
                        "description": '{"idempotency_key", "state": "running", "at"} or '
                        '{"idempotency_key", "state": "answered", "at", "status", "answer"}: the first answer, '
                        "as a retry with the key would get it"
                    },
                    **_errors(400, 401, 403),
                    "404": {"description": "no request with this key: none in 24 h, or it wrote nothing; send it"},
                },
            }
        },
        "/healthz": {"get": {"security": [], "summary": "Readiness: 200, or 503 while Kafka is unreachable"}},
        "/metrics": {"get": {"security": [], "summary": "Prometheus metrics"}},
    },
}
