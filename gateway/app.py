"""The gateway's HTTP surface: thin handlers over :mod:`ferry.gateway.produce`,
:mod:`ferry.gateway.transactions` and :mod:`ferry.gateway.idempotency` (docs/contract.md §9, §11).

Every route but ``/healthz`` and ``/metrics`` needs ``Authorization: Bearer <token>`` (an ``admin``
token, or a ``produce`` token whose topic patterns match). Errors are JSON ``{"error", "field"}``
(the seed route: ``{"code", "message"}``) with 400, 401, 403, 404, 409, 413, 422 or 503 — bad input
never yields a 500, and a 503 always carries ``Retry-After``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ferry import log, txn
from ferry.clock import now_ms
from ferry.errors import ValidationError
from ferry.gateway import records as rq
from ferry.gateway.idempotency import Conflicting, Idempotency, InProgress
from ferry.gateway.metrics import GatewayMetrics
from ferry.gateway.openapi import OPENAPI
from ferry.gateway.produce import Unavailable, write
from ferry.gateway.producer import Busy, Producer
from ferry.gateway.tokens import Principal, TokenCache, TokensUnavailable
from ferry.gateway.topics import TopicCache
from ferry.gateway.transactions import Transactions
from ferry.txnlog import TxnLogError, TxnTooLarge

_log = log.get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC = ("/healthz", "/metrics")
SEED_ROUTE = "/v1/kafka/send"


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.retry_after_s = retry_after_s


@dataclass
class Gateway:
    """Everything the handlers use, built by :mod:`ferry.gateway.service`."""

    producer: Producer
    topics: TopicCache
    tokens: TokenCache
    idempotency: Idempotency | None
    transactions: Transactions | None
    metrics: GatewayMetrics
    delay_topic: str
    max_body_bytes: int


GATEWAY = web.AppKey("gateway", Gateway)
PRINCIPAL = web.RequestKey("principal", Principal)


def _json(status: int, body: dict[str, Any], retry_after_s: int | None = None) -> web.Response:
    response = web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
    if retry_after_s is not None:
        response.headers["Retry-After"] = str(retry_after_s)
    return response


def _error_body(request: web.Request, status: int, message: str, field: str | None) -> dict[str, Any]:
    if request.path == SEED_ROUTE:
        return {"code": status, "message": f"{field}: {message}" if field else message}
    return {"error": message, "field": field}


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    gw = request.app[GATEWAY]
    try:
        return await handler(request)
    except ApiError as exc:
        kind = {401: "auth", 403: "forbidden", 404: "unknown_topic", 413: "too_large", 503: "unavailable"}
        gw.metrics.errors.labels(kind.get(exc.status, "bad_request")).inc()
        return _json(exc.status, _error_body(request, exc.status, exc.message, exc.field), exc.retry_after_s)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        gw.metrics.errors.labels("too_large" if exc.status == 413 else "http").inc()
        message = exc.reason
        if exc.status == 413:
            message = f"the body is over FERRY_MAX_BODY_BYTES ({gw.max_body_bytes:,} bytes)"
        return _json(exc.status, _error_body(request, exc.status, message, None))


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in PUBLIC:
        return await handler(request)
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "missing bearer token: send Authorization: Bearer <token>")
    try:
        principal = await request.app[GATEWAY].tokens.principal(token.strip())
    except TokensUnavailable as exc:
        raise ApiError(503, str(exc), retry_after_s=2) from None
    if principal is None:
        raise ApiError(401, "invalid or revoked token")
    if principal.scope == "read":
        raise ApiError(403, "a read token may not produce; use a produce or admin token")
    request[PRINCIPAL] = principal
    return await handler(request)


async def _body(request: web.Request) -> tuple[Any, bytes]:
    limit = request.app[GATEWAY].max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, f"the body is over FERRY_MAX_BODY_BYTES ({limit:,} bytes)")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"the body is over FERRY_MAX_BODY_BYTES ({limit:,} bytes)") from None
    try:
        return orjson.loads(raw), raw
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}", "body") from None


def _allowed(request: web.Request, topic: str) -> None:
    if not request[PRINCIPAL].may_produce(topic):
        raise ApiError(403, f"this token may not produce to topic {topic!r}", "topic")


async def _partitions(gw: Gateway, topics: set[str]) -> dict[str, int]:
    out = {}
    for topic in sorted(topics):
        count = await gw.topics.partitions(topic)
        if count is None:
            raise ApiError(404, f"topic {topic!r} does not exist (the gateway never creates topics)", "topic")
        out[topic] = count
    return out


async def _once(
    request: web.Request, raw: bytes, run: Callable[[], Awaitable[tuple[int, dict[str, Any]]]]
) -> web.Response:
    """Run a produce at most once per ``Idempotency-Key`` (§9), or simply run it without one."""
    gw = request.app[GATEWAY]
    key = request.headers.get("Idempotency-Key")
    if key is None or gw.idempotency is None:
        status, body = await run()
        return _json(status, body)
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable() or " " in key:
        raise ApiError(400, "Idempotency-Key must be 1-255 visible ASCII characters", "Idempotency-Key")
    seen = request.path.encode() + b"\0" + raw
    if "x-delay" in request.headers:  # part of the request on the seed route
        seen += b"\0x-delay: " + request.headers["x-delay"].encode()
    fingerprint = hashlib.sha256(seen).hexdigest()
    try:
        status, body, repeated = await gw.idempotency.run(request[PRINCIPAL].name, key, fingerprint, run)
    except Conflicting as exc:
        raise ApiError(422, str(exc), "Idempotency-Key") from None
    except InProgress as exc:
        raise ApiError(409, str(exc), "Idempotency-Key", retry_after_s=1) from None
    response = _json(status, body)
    if repeated:
        response.headers["Idempotent-Replayed"] = "true"
    return response


# --- routes --------------------------------------------------------------------------------------


async def produce_records(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    topic = request.match_info["topic"]
    try:
        rq.check_topic(topic)
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None
    _allowed(request, topic)
    doc, raw = await _body(request)
    now = now_ms()
    try:
        parsed = rq.parse_request(doc, topic, now)
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None
    partitions = await _partitions(gw, {topic})

    async def run() -> tuple[int, dict[str, Any]]:
        written = await _write(gw, parsed, partitions, now)
        return 200, {"results": written}

    return await _once(request, raw, run)


async def seed_send(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    doc, raw = await _body(request)
    now = now_ms()
    try:
        rec = rq.parse_seed(doc, now, request.headers.get("x-delay"))
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None
    _allowed(request, rec.topic)
    partitions = await _partitions(gw, {rec.topic})

    async def run() -> tuple[int, dict[str, Any]]:
        (result,) = await _write(gw, [rec], partitions, now)
        if "error" in result:
            return 503, {"code": 503, "message": result["error"]}
        return 200, {"code": 0, "message": "ok", **result}

    return await _once(request, raw, run)


async def _write(
    gw: Gateway, parsed: list[rq.Outgoing | rq.Refused], partitions: dict[str, int], now: int
) -> list[dict[str, Any]]:
    started = time.perf_counter()
    try:
        written = await write(gw.producer, parsed, partitions=partitions, delay_topic=gw.delay_topic, now_ms=now)
    except Unavailable as exc:
        raise ApiError(503, str(exc), retry_after_s=exc.retry_after_s) from None
    finally:
        gw.metrics.latency.observe(time.perf_counter() - started)
    for topic in partitions:
        records, size = gw.metrics.per_topic(topic)
        records.inc(written.records + written.scheduled)
        size.inc(written.bytes)
    if written.refused:
        gw.metrics.errors.labels("record_refused").inc(written.refused)
    if written.failed:
        gw.metrics.errors.labels("record_failed").inc(written.failed)
    return written.results


# --- transactions (§11) ------------------------------------------------------------------------


def _txns(request: web.Request) -> Transactions:
    found = request.app[GATEWAY].transactions
    if found is None:
        raise ApiError(503, "transactions are not available on this gateway", retry_after_s=5)
    return found


async def txn_prepare(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    doc, _ = await _body(request)
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list) or not doc["records"]:
        raise ApiError(400, "must be a non-empty list of records, each with its topic", "records")
    if len(doc["records"]) > rq.MAX_RECORDS:
        raise ApiError(400, f"at most {rq.MAX_RECORDS:,} records per transaction", "records")
    now = now_ms()
    stored = []
    for i, raw in enumerate(doc["records"]):
        topic = raw.get("topic") if isinstance(raw, dict) else None
        if not isinstance(topic, str):
            raise ApiError(400, "is required: the topic to write the record to", f"records[{i}].topic")
        try:
            rq.check_topic(topic, f"records[{i}].topic")
        except ValidationError as exc:
            raise ApiError(400, exc.message, exc.field) from None
        _allowed(request, topic)
        rec = rq.parse_record({k: v for k, v in raw.items() if k != "topic"}, topic, f"records[{i}]", now)
        if isinstance(rec, rq.Refused):
            raise ApiError(400, rec.error, rec.field)
        if rec.due_ms is not None:
            raise ApiError(400, "records of a transaction cannot be delayed", f"records[{i}].delay_ms")
        stored.append(rec)
    partitions = await _partitions(gw, {r.topic for r in stored})
    for i, rec in enumerate(stored):
        if rec.partition is not None and rec.partition >= partitions[rec.topic]:
            raise ApiError(
                400, f"topic {rec.topic!r} has partitions 0-{partitions[rec.topic] - 1}", f"records[{i}].partition"
            )
    try:
        answer = await _txns(request).prepare(stored, doc.get("check_url"), doc.get("timeout_ms"))
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None
    except TxnTooLarge as exc:
        raise ApiError(413, str(exc), "records") from None
    except TxnLogError as exc:
        raise ApiError(503, f"the transaction log cannot be reached now: {exc}", retry_after_s=2) from None
    return _json(201, answer)


async def _verb(request: web.Request, call: Callable[[str], Awaitable[dict[str, Any]]]) -> web.Response:
    try:
        return _json(200, await call(request.match_info["id"]))
    except txn.TxnError as exc:
        raise ApiError(exc.status, str(exc), "id") from None
    except (TxnLogError, Busy) as exc:
        raise ApiError(503, f"the transaction log cannot be reached now: {exc}", retry_after_s=2) from None


async def txn_commit(request: web.Request) -> web.Response:
    return await _verb(request, _txns(request).commit)


async def txn_rollback(request: web.Request) -> web.Response:
    return await _verb(request, _txns(request).rollback)


async def txn_get(request: web.Request) -> web.Response:
    return await _verb(request, _txns(request).get)


# --- service routes ------------------------------------------------------------------------------


async def healthz(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    if gw.producer.down:
        return _json(503, {"status": "kafka unreachable", "service": "gateway"}, retry_after_s=2)
    return _json(200, {"status": "ok", "service": "gateway", "in_flight_bytes": gw.producer.in_flight_bytes})


async def metrics(request: web.Request) -> web.Response:
    gw = request.app[GATEWAY]
    gw.metrics.in_flight.set(gw.producer.in_flight_bytes)
    return web.Response(body=generate_latest(gw.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi(_: web.Request) -> web.Response:
    return _json(200, OPENAPI)


def create_app(gw: Gateway) -> web.Application:
    app = web.Application(middlewares=[errors_middleware, auth_middleware], client_max_size=gw.max_body_bytes)
    app[GATEWAY] = gw
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/openapi.json", openapi)
    app.router.add_post(r"/api/v1/topics/{topic:.+}/records", produce_records)
    app.router.add_post(SEED_ROUTE, seed_send)
    app.router.add_post("/api/v1/transactions", txn_prepare)
    app.router.add_post("/api/v1/transactions/{id}/commit", txn_commit)
    app.router.add_post("/api/v1/transactions/{id}/rollback", txn_rollback)
    app.router.add_get("/api/v1/transactions/{id}", txn_get)
    return app


__all__ = ["GATEWAY", "ApiError", "Busy", "Gateway", "create_app"]
