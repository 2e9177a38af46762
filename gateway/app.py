"""The gateway's HTTP surface: thin handlers over :mod:`ferry.gateway.produce`,
:mod:`ferry.gateway.transactions` and :mod:`ferry.gateway.idempotency` (docs/contract.md §9, §11).

One request handler (:func:`create_handler`) serves the gateway's HTTP server
(:mod:`ferry.gateway.httpd`): it authenticates, reads the request's body under its connection's
deadline, routes it to one of a few paths, and answers every error as JSON — an HTTP-level one (an
unknown path or method, 413, 417) it raises as :class:`HttpError` for the server to answer through
:func:`create_refusal`, as the server answers its own refusals.

Every route but ``/healthz`` and ``/metrics`` needs ``Authorization: Bearer <token>`` (an ``admin``
token, or a ``produce`` token whose topic patterns match every topic written, a transaction's
included; a ``read`` token may only read a transaction's state). Errors are JSON ``{"error", "field"}``
(the seed route: ``{"code", "message", "msg", "data"}``) with 400, 401, 403, 404, 409, 413, 422, 429, 503 or 504 —
bad input never yields a 500, a 503 (nothing written) always carries ``Retry-After``, and a 504 says
the records may or may not be written. Every produce is answered by its deadline,
``FERRY_GATEWAY_PRODUCE_TIMEOUT_MS`` after its body was read (with an ``Idempotency-Key``, plus the
short write of its answer to the key's topic).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ferry import log, txn
from ferry.clock import now_ms
from ferry.errors import ValidationError
from ferry.gateway import records as rq
from ferry.gateway.httpmsg import Handler, HttpError, Refusal, Request, Response
from ferry.gateway.idempotency import Conflicting, Idempotency, InProgress, KeyUnavailable
from ferry.gateway.metrics import GatewayMetrics
from ferry.gateway.openapi import OPENAPI
from ferry.gateway.produce import Unavailable, Unknown, Written, write
from ferry.gateway.producer import Busy, Producer
from ferry.gateway.tokens import Principal, TokenCache, TokensUnavailable
from ferry.gateway.transactions import Transactions
from ferry.guessing import FailedLogins
from ferry.topic_cache import TopicCache
from ferry.txnlog import TxnLogError, TxnTooLarge

_log = log.get_logger(__name__)
PUBLIC = ("/healthz", "/metrics")
SEED_ROUTE = "/v1/kafka/send"
SEED_SEND_PATHS = (SEED_ROUTE, SEED_ROUTE + "/")
"""The seed route's paths: the seed (Spring MVC 5.2, trailing-slash match on) took both."""
SEED_BATCH_PATHS = (SEED_ROUTE + "_batch", SEED_ROUTE + "_batch/")
SEED_PATHS = (*SEED_SEND_PATHS, *SEED_BATCH_PATHS)
"""Every path whose answers, errors included, are shaped as the seed's."""


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
    idempotency: Idempotency
    transactions: Transactions | None
    metrics: GatewayMetrics
    delay_topic: str
    max_body_bytes: int
    logins: FailedLogins = dataclasses.field(default_factory=FailedLogins)  # wrong tokens per client address


Route = Callable[[Gateway, Request, str], Awaitable[Response]]
"""A route's handler: the gateway, the request, and the path's parameter (a topic, an id, or "")."""


def _json(status: int, body: dict[str, Any], retry_after_s: int | None = None) -> Response:
    headers = None if retry_after_s is None else {"Retry-After": str(retry_after_s)}
    return Response(status, orjson.dumps(body), headers=headers)


def _seed_answer(code: int, message: str, **extra: Any) -> dict[str, Any]:
    """An answer of the seed route: §9's ``{"code", "message", ...}``, plus the fields the seed's own
    answers have, ``{"code", "data", "msg"}``, for its clients that read them: ``msg`` is the seed's
    ``"send success"`` on a success and the ``message`` on an error; ``data`` is ``null``."""
    return {"code": code, "message": message, **extra, "msg": "send success" if code == 0 else message, "data": None}


SEED_TOPIC_NOT_EXIST, SEED_SEND_FAILED, SEED_BATCH_SEND_FAILED, SEED_DELAY_LEVEL_ERROR = 10005, 10006, 10007, 10011
"""The seed's error codes (its ReturnCodeEnum) for the errors it had too."""


def seed_code(status: int, field: str | None) -> int:
    """The ``code`` of a seed-route error: the seed's own code where the seed had that error (an
    unknown topic, a bad ``x-delay``, a send that failed: nothing written, or not known to be), so
    that a seed client's branches on ``code`` still work; else the HTTP status."""
    if status == 404 and field is not None and (field == "topic" or field.endswith("].topic")):
        return SEED_TOPIC_NOT_EXIST
    if status == 400 and field is not None and (field == "x-delay" or field.endswith("headers.x-delay")):
        return SEED_DELAY_LEVEL_ERROR
    if status in (503, 504):
        return SEED_SEND_FAILED
    return status


def _error_body(request: Request, status: int, message: str, field: str | None) -> dict[str, Any]:
    if request.path in SEED_PATHS:
        return _seed_answer(seed_code(status, field), f"{field}: {message}" if field else message)
    return {"error": message, "field": field}


_ERROR_KINDS = {401: "auth", 403: "forbidden", 404: "unknown_topic", 413: "too_large", 429: "auth", 503: "unavailable"}
"""The ``kind`` label of ``ferry_gateway_errors_total`` by status."""


def create_handler(gw: Gateway) -> Handler:
    """The gateway's one request handler (see the module's docstring)."""

    async def handle(request: Request) -> Response:
        try:
            if request.path not in PUBLIC:
                request.principal = await _authenticate(gw, request)
                _check_read_scope(request)
            await request.read()  # the body, once the headers passed (Expect: 100-continue)
            route, param = _route(request.method, request.path)
            return await route(gw, request, param)
        except ApiError as exc:
            kind = _ERROR_KINDS.get(exc.status, "bad_request")
            if exc.status == 404 and exc.field != "topic":
                kind = "not_found"  # a transaction or an Idempotency-Key
            gw.metrics.errors.labels(kind).inc()
            return _json(exc.status, _error_body(request, exc.status, exc.message, exc.field), exc.retry_after_s)

    return handle


def create_refusal(gw: Gateway) -> Refusal:
    """The answer to an HTTP-level refusal, from the handler or from the server itself (bytes that
    are not HTTP, a head too large, a failed handler): counted, and shaped as the route's errors."""

    def refuse(request: Request, exc: HttpError) -> Response:
        kind = {413: "too_large", 500: "internal"}.get(exc.status, "http")
        gw.metrics.errors.labels(kind).inc()
        message = exc.message
        if exc.status == 413:
            message = f"the body is over FERRY_MAX_BODY_BYTES ({gw.max_body_bytes:,} bytes)"
        body = orjson.dumps(_error_body(request, exc.status, message, None))
        return Response(exc.status, body, headers=exc.headers or None)

    return refuse


async def _authenticate(gw: Gateway, request: Request) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "missing bearer token: send Authorization: Bearer <token>")
    token = token.strip()
    now = time.monotonic()
    wait_s = gw.logins.blocked_for_s(request.client, now)
    if wait_s:
        # Many clients may share one address (a proxy, a NAT): a token known to be right still
        # passes; a token not known now is refused without a look-up, so guessing stops there.
        known = gw.tokens.known(token)
        if known is not None:
            return known
        retry_s = int(wait_s) + 1
        raise ApiError(429, f"too many invalid tokens from this address; retry in {retry_s} s", retry_after_s=retry_s)
    try:
        principal = await gw.tokens.principal(token)
    except TokensUnavailable as exc:
        raise ApiError(503, str(exc), retry_after_s=2) from None
    if principal is None:
        gw.logins.failed(request.client, now)  # right tokens do not clear it: no guessing in between
        raise ApiError(401, "invalid or revoked token")
    return principal


def _check_read_scope(request: Request) -> None:
    """A read token may only read (the state of a transaction); every other route produces. Checked
    before the body is read, so such a request is refused before it is sent (Expect: 100-continue)."""
    if request.principal.scope != "read":
        return
    try:
        route, _ = _route(request.method, request.path)
    except HttpError:
        route = None  # not a route: refused like any a read token may not use
    if route not in _READ_ROUTES:
        raise ApiError(403, "a read token may not produce; use a produce or admin token")


async def _body(request: Request, seed: bool = False) -> tuple[Any, bytes]:
    """The request's JSON body (on the seed route, also one with a byte order mark, as the seed
    read it). It was read, within the body limit, before the route ran (a body over it is the
    handler's 413)."""
    raw = await request.read()  # the bytes already read
    try:
        return rq.loads(rq.seed_json_bytes(raw) if seed else raw), raw
    except ValueError as exc:  # orjson.JSONDecodeError is one
        raise ApiError(400, f"the body is not valid JSON: {exc}", "body") from None


def _allowed(request: Request, topic: str) -> None:
    if topic.startswith("__"):
        raise ApiError(
            403,
            f"topic {topic!r} is internal to Kafka or Ferry (a name starting with '__'): nobody produces to it",
            "topic",
        )
    if not request.principal.may_produce(topic):
        raise ApiError(403, f"this token may not produce to topic {topic!r}", "topic")


async def _partitions(gw: Gateway, topics: set[str]) -> dict[str, int]:
    out = {}
    for topic in sorted(topics):
        count = await gw.topics.partitions(topic)
        if count is None:
            raise ApiError(404, f"topic {topic!r} does not exist (the gateway never creates topics)", "topic")
        out[topic] = count
    return out


def _check_key(key: str) -> None:
    if not 1 <= len(key) <= 255 or not key.isascii() or not key.isprintable() or " " in key:
        raise ApiError(400, "Idempotency-Key must be 1-255 visible ASCII characters", "Idempotency-Key")


async def _once(
    gw: Gateway,
    request: Request,
    raw: bytes,
    run: Callable[[], Awaitable[tuple[int, dict[str, Any]]]],
    deadline: float,
) -> Response:
    """Run a produce at most once per ``Idempotency-Key`` (§9), or simply run it without one."""
    key = request.headers.get("idempotency-key")
    if key is None:
        status, body = await run()
        return _json(status, body)
    _check_key(key)
    seen = request.path.encode() + b"\0" + raw
    if "x-delay" in request.headers:  # part of the request on the seed route
        seen += b"\0x-delay: " + request.headers["x-delay"].encode()
    fingerprint = hashlib.sha256(seen).hexdigest()
    try:
        status, body, repeated = await gw.idempotency.run(request.principal.name, key, fingerprint, run, deadline)
    except Conflicting as exc:
        raise ApiError(422, str(exc), "Idempotency-Key") from None
    except InProgress as exc:
        raise ApiError(409, str(exc), "Idempotency-Key", retry_after_s=1) from None
    except KeyUnavailable as exc:
        raise ApiError(503, str(exc), "Idempotency-Key", retry_after_s=2) from None
    return Response(status, orjson.dumps(body), headers={"Idempotent-Replayed": "true"} if repeated else None)


# --- routes --------------------------------------------------------------------------------------


async def produce_records(gw: Gateway, request: Request, topic: str) -> Response:
    try:
        rq.check_topic(topic)
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None
    _allowed(request, topic)
    raw = await request.read()
    now = now_ms()
    parsed = rq.read_plain(raw, topic)  # the common body, in C
    if parsed is None:
        doc, _ = await _body(request)
        try:
            parsed = rq.parse_request(doc, topic, now)
        except ValidationError as exc:
            raise ApiError(400, exc.message, exc.field) from None
    deadline = time.monotonic() + gw.producer.produce_timeout_s
    partitions = await _partitions(gw, {topic})

    async def run() -> tuple[int, dict[str, Any]]:
        try:
            written = await _write(gw, parsed, partitions, now, deadline)
        except Unknown as exc:  # an answer, not a failure: kept for the key (its retry writes nothing)
            return 504, {"error": str(exc), "field": None}
        return 200, {"results": written.answer()}

    return await _once(gw, request, raw, run, deadline)


class _SeedRequest(NamedTuple):
    doc: Any
    raw: bytes
    deadline: float  # time.monotonic()
    now: int  # epoch ms
    parsed: Any  # what the route's parser made of the body


async def _seed_request(gw: Gateway, request: Request, parse: Callable[[Any, int, str | None], Any]) -> _SeedRequest:
    """A seed route's body read (a byte order mark taken, as the seed did) and parsed with its
    ``x-delay`` HTTP header; 400 naming the field the parser refused."""
    doc, raw = await _body(request, seed=True)
    deadline = time.monotonic() + gw.producer.produce_timeout_s
    now = now_ms()
    try:
        return _SeedRequest(doc, raw, deadline, now, parse(doc, now, request.headers.get("x-delay")))
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None


async def seed_send(gw: Gateway, request: Request, _: str) -> Response:
    _, raw, deadline, now, rec = await _seed_request(gw, request, rq.parse_seed)
    _allowed(request, rec.topic)
    partitions = await _partitions(gw, {rec.topic})

    async def run() -> tuple[int, dict[str, Any]]:
        try:
            (result,) = (await _write(gw, [rec], partitions, now, deadline)).listed()
        except Unknown as exc:  # an answer, not a failure: kept for the key (its retry writes nothing)
            return 504, _seed_answer(seed_code(504, None), str(exc))
        if "field" in result:  # refused for good: a retry fails the same way
            return 400, _seed_answer(400, f"payload: {result['error']}")
        return 200, _seed_answer(0, "ok", **result)

    return await _once(gw, request, raw, run, deadline)


async def seed_send_batch(gw: Gateway, request: Request, _: str) -> Response:
    """The seed's ``POST /v1/kafka/send_batch``: every message written at once, as ``/v1/kafka/send``
    takes it. The answer has a result per message; when some were not written, the seed's
    ``code`` 10007 and, in ``data``, those messages as sent (the seed's failed list) to send again."""
    doc, raw, deadline, now, parsed = await _seed_request(gw, request, rq.parse_seed_batch)
    first: dict[str, int] = {}  # topic → the first message naming it, for the errors' field
    for i, rec in enumerate(parsed):
        first.setdefault(rec.topic, i)
    partitions: dict[str, int] = {}
    for topic, i in first.items():
        try:
            _allowed(request, topic)
            partitions.update(await _partitions(gw, {topic}))
        except ApiError as exc:
            raise ApiError(exc.status, exc.message, f"messages[{i}].topic") from None

    async def run() -> tuple[int, dict[str, Any]]:
        try:
            results = (await _write(gw, list(parsed), partitions, now, deadline)).listed()
        except Unknown as exc:  # an answer, not a failure: kept for the key (its retry writes nothing)
            return 504, _seed_answer(seed_code(504, None), str(exc))
        for i, result in enumerate(results):
            if "field" in result:  # refused for good: the message's payload (too large)
                result["field"] = f"messages[{i}].payload"
        failed = [i for i, result in enumerate(results) if "error" in result]
        if not failed:
            return 200, {**_seed_answer(0, "ok", results=results), "msg": "batch send success"}
        answer = _seed_answer(
            SEED_BATCH_SEND_FAILED, f"{len(failed)} of {len(results)} messages not written", results=results
        )
        return 200, {**answer, "data": [doc["messages"][i] for i in failed]}

    return await _once(gw, request, raw, run, deadline)


async def _write(
    gw: Gateway, parsed: list[rq.Outgoing | rq.Refused], partitions: dict[str, int], now: int, deadline: float
) -> Written:
    started = time.perf_counter()
    try:
        written = await write(
            gw.producer, parsed, partitions=partitions, delay_topic=gw.delay_topic, now_ms=now, deadline=deadline
        )
    except Unavailable as exc:
        raise ApiError(503, str(exc), retry_after_s=exc.retry_after_s) from None
    except Unknown:
        gw.metrics.errors.labels("unknown_outcome").inc()
        gw.topics.doubt()  # a topic deleted since the last listing times out: the next request asks
        raise
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
        gw.topics.doubt()
    return written


# --- transactions (§11) ------------------------------------------------------------------------


def _txns(gw: Gateway) -> Transactions:
    found = gw.transactions
    if found is None:
        raise ApiError(503, "transactions are not available on this gateway", retry_after_s=5)
    return found


async def txn_prepare(gw: Gateway, request: Request, __: str) -> Response:
    doc, _ = await _body(request)
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list) or not doc["records"]:
        raise ApiError(400, "must be a non-empty list of records, each with its topic", "records")
    if len(doc["records"]) > rq.MAX_RECORDS:
        raise ApiError(400, f"at most {rq.MAX_RECORDS:,} records per transaction", "records")
    unknown = sorted(set(doc) - {"records", "check_url", "timeout_ms"})
    if unknown:  # a misspelt timeout_ms would otherwise be the default, silently
        raise ApiError(400, 'unknown field; the body is {"records", "check_url", "timeout_ms"}', unknown[0])
    now = now_ms()
    stored = []
    for i, raw in enumerate(doc["records"]):
        try:
            rec = rq.parse_txn_record(raw, f"records[{i}]", now)
        except ValidationError as exc:
            raise ApiError(400, exc.message, exc.field) from None
        _allowed(request, rec.topic)
        stored.append(rec)
    partitions = await _partitions(gw, {r.topic for r in stored})
    for i, rec in enumerate(stored):
        if rec.partition is not None and rec.partition >= partitions[rec.topic]:
            raise ApiError(
                400, f"topic {rec.topic!r} has partitions 0-{partitions[rec.topic] - 1}", f"records[{i}].partition"
            )
    try:
        answer = await _txns(gw).prepare(stored, doc.get("check_url"), doc.get("timeout_ms"))
    except ValidationError as exc:
        raise ApiError(400, exc.message, exc.field) from None
    except TxnTooLarge as exc:
        raise ApiError(413, str(exc), "records") from None
    except TxnLogError as exc:
        raise ApiError(503, f"the transaction log cannot be reached now: {exc}", retry_after_s=2) from None
    return _json(201, answer)


async def _verb(
    txn_id: str, call: Callable[[str, Callable[[str], bool]], Awaitable[dict[str, Any]]], may: Callable[[str], bool]
) -> Response:
    try:
        return _json(200, await call(txn_id, may))
    except txn.TxnError as exc:
        raise ApiError(exc.status, str(exc), "id") from None
    except (TxnLogError, Busy) as exc:
        raise ApiError(503, f"the transaction log cannot be reached now: {exc}", retry_after_s=2) from None


async def txn_commit(gw: Gateway, request: Request, txn_id: str) -> Response:
    return await _verb(txn_id, _txns(gw).commit, request.principal.may_produce)


async def txn_rollback(gw: Gateway, request: Request, txn_id: str) -> Response:
    return await _verb(txn_id, _txns(gw).rollback, request.principal.may_produce)


async def txn_get(gw: Gateway, request: Request, txn_id: str) -> Response:
    return await _verb(txn_id, _txns(gw).get, request.principal.may_read)


async def request_get(gw: Gateway, request: Request, key: str) -> Response:
    """What became of this token's produce sent with ``Idempotency-Key: key`` (docs/gateway.md):
    its answer, or that it is still running; 404 when a request sent with the key now would run."""
    _check_key(key)
    entry = gw.idempotency.recall(request.principal.name, key)
    if entry is None:
        raise ApiError(
            404,
            "no request with this Idempotency-Key is remembered for this token: none was sent in the "
            "last 24 h, or it wrote nothing (a 503); sending it now runs it",
            "Idempotency-Key",
        )
    if entry.state == "claimed":
        return _json(200, {"idempotency_key": key, "state": "running", "at": entry.at_ms})
    answered = {"state": "answered", "at": entry.at_ms, "status": entry.status, "answer": entry.answer}
    return _json(200, {"idempotency_key": key, **answered})


# --- service routes ------------------------------------------------------------------------------


async def healthz(gw: Gateway, _: Request, __: str) -> Response:
    if gw.producer.down:
        return _json(503, {"status": "kafka unreachable", "service": "gateway"}, retry_after_s=2)
    return _json(200, {"status": "ok", "service": "gateway", "in_flight_bytes": gw.producer.in_flight_bytes})


async def metrics(gw: Gateway, _: Request, __: str) -> Response:
    gw.metrics.in_flight.set(gw.producer.in_flight_bytes)
    if gw.transactions is not None:
        gw.metrics.txn_lingering.set(1 if gw.transactions.log.lingering else 0)
        gw.metrics.txn_switches.set(gw.transactions.log.producer_switches)
        gw.metrics.txn_log_reads.set(gw.transactions.log.log_reads)
        gw.metrics.txn_committed_entries.set(gw.transactions.log.committed_entries)
        gw.metrics.txn_committed_transactions.set(gw.transactions.log.committed_transactions)
    return Response(200, generate_latest(gw.metrics.registry), content_type=CONTENT_TYPE_LATEST)


async def openapi(_: Gateway, __: Request, ___: str) -> Response:
    return _json(200, OPENAPI)


# --- routing ---------------------------------------------------------------------------------

_FIXED: dict[str, dict[str, Route]] = {
    "/healthz": {"GET": healthz},
    "/metrics": {"GET": metrics},
    "/api/v1/openapi.json": {"GET": openapi},
    **{path: {"POST": seed_send} for path in SEED_SEND_PATHS},
    **{path: {"POST": seed_send_batch} for path in SEED_BATCH_PATHS},
    "/api/v1/transactions": {"POST": txn_prepare},
}
_TOPIC = ("/api/v1/topics/", "/records")  # POST /api/v1/topics/{topic}/records
_TXN = "/api/v1/transactions/"  # GET …/{id}, POST …/{id}/commit, POST …/{id}/rollback
_REQUESTS = "/api/v1/requests/"  # GET …/{Idempotency-Key}, percent-encoded
_REQUEST_GET: dict[str, Route] = {"GET": request_get}
_TOPIC_ROUTES: dict[str, Route] = {"POST": produce_records}
_TXN_GET: dict[str, Route] = {"GET": txn_get}
_TXN_VERBS: dict[str, dict[str, Route]] = {"commit": {"POST": txn_commit}, "rollback": {"POST": txn_rollback}}
_READ_ROUTES = frozenset({txn_get})
"""The routes a read token may use (it sees transactions in the portal too)."""


def _route(method: str, path: str) -> tuple[Route, str]:
    """The route of ``method path`` and its parameter; HTTP 404 or 405 when there is none."""
    routes, param = _FIXED.get(path), ""
    if routes is None:
        head, tail = _TOPIC
        if path.startswith(head) and path.endswith(tail) and len(path) > len(head) + len(tail):
            routes, param = _TOPIC_ROUTES, path[len(head) : -len(tail)]
        elif path.startswith(_REQUESTS) and len(path) > len(_REQUESTS):
            routes, param = _REQUEST_GET, path[len(_REQUESTS) :]
        elif path.startswith(_TXN):
            param, slash, verb = path[len(_TXN) :].partition("/")
            routes = (_TXN_VERBS.get(verb) if slash else _TXN_GET) if param else None
    if routes is None:
        raise HttpError(404, f"no route {_shown(path)}; the gateway's routes are {_ROUTES}")
    route = routes.get("GET" if method == "HEAD" else method)
    if route is None:
        allowed = sorted(set(routes) | ({"HEAD"} if "GET" in routes else set()))
        raise HttpError(
            405,
            f"{_shown(method)} is not allowed on {_shown(path)}; use {' or '.join(allowed)}",
            headers={"Allow": ",".join(allowed)},
        )
    return route, param


_ROUTES = (
    "POST /api/v1/topics/{topic}/records, POST /v1/kafka/send and /send_batch, POST /api/v1/transactions, "
    "GET /api/v1/transactions/{id}, POST /api/v1/transactions/{id}/commit or /rollback, "
    "GET /api/v1/requests/{Idempotency-Key}, GET /healthz, "
    "GET /metrics and GET /api/v1/openapi.json"
)
"""What a 404 lists, so that a client with a wrong path sees the right one."""


def _shown(text: str, limit: int = 200) -> str:
    """``text`` as an error message quotes it: at most ``limit`` characters."""
    return text if len(text) <= limit else text[:limit] + "…"


__all__ = ["ApiError", "Busy", "Gateway", "create_handler", "create_refusal"]
