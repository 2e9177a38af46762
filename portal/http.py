"""The portal's HTTP plumbing shared by every route module: application keys, the JSON error shape,
the middlewares (errors, CSRF, auth, security headers, metrics) and request helpers.

Every route under ``/api/v1`` needs ``Authorization: Bearer``; GETs need a ``read`` or ``admin``
token, everything else ``admin``. State-changing requests a browser marks as cross-site are
refused first (:mod:`ferry.portal.csrf`). ``/healthz``, ``/metrics`` and the UI's files are open.
Errors are JSON ``{"error", "field"}`` with 400, 401, 403, 404, 409 or 413; bad input never
yields a 500. Route modules import from here, never from :mod:`ferry.portal.app`, which only
assembles them (so no route module and the application import each other).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from sqlalchemy.engine import Engine

from ferry import log
from ferry.config import Settings
from ferry.errors import FerryError, ValidationError
from ferry.guessing import FailedLogins
from ferry.portal import auth, csrf
from ferry.portal.cluster import Cluster
from ferry.portal.history_store import HistoryStore
from ferry.portal.ops import Operations, OpError

_log = log.get_logger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SETTINGS = web.AppKey("settings", Settings)
ENGINE = web.AppKey("engine", Engine)
CLUSTER = web.AppKey("cluster", Cluster)
OPS = web.AppKey("operations", Operations)
METRICS = web.AppKey("metrics", dict)
PRINCIPAL = web.RequestKey("principal", auth.Principal)
LOGINS = web.AppKey("failed-logins", FailedLogins)
HISTORY = web.AppKey("history", HistoryStore)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
PUBLIC = ("/healthz", "/metrics")


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def error(status: int, message: str, field: str | None = None) -> web.Response:
    return web.json_response({"error": message, "field": field}, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except (ApiError, OpError) as exc:
        response = error(exc.status, exc.message, exc.field)
    except ValidationError as exc:
        response = error(400, exc.message, exc.field)
    except web.HTTPRequestEntityTooLarge:
        response = error(413, too_large(request.app[SETTINGS].portal.max_body_bytes), "body")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error(exc.status, _http_message(request, exc))
        if "Allow" in exc.headers:  # 405 must say what is allowed (RFC 9110)
            response.headers["Allow"] = exc.headers["Allow"]
    except FerryError as exc:
        _log.warning("api.unavailable", path=request.path, error=str(exc))
        response = error(503, str(exc))
    except Exception as exc:
        # First line only: SQLAlchemy appends the statement (and, were they not hidden, its
        # parameters) on further lines.
        cause = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
        _log.error("api.failed", path=request.path, method=request.method, error=cause, exc_info=True)
        response = error(500, "internal error; see the portal log")
    for k, v in SECURITY_HEADERS.items():
        response.headers.setdefault(k, v)
    return response


@web.middleware
async def csrf_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    reason = csrf.refusal(request.method, request.headers)
    if reason:
        _log.warning("api.cross_site_refused", path=request.path, method=request.method, reason=reason)
        raise ApiError(403, f"cross-site request refused: {reason}; change things from the portal's own UI or API")
    return await handler(request)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/api/"):
        return await handler(request)
    token = auth.bearer(request.headers.get("Authorization"))
    if token is None:
        raise ApiError(401, "missing bearer token: send Authorization: Bearer <token>")
    settings = request.app[SETTINGS]
    limiter = request.app[LOGINS]
    client = request.remote or "unknown"
    now = time.monotonic()
    wait_s = limiter.blocked_for_s(client, now)
    if wait_s:
        response = error(429, f"too many invalid tokens from this address; retry in {int(wait_s) + 1} s")
        response.headers["Retry-After"] = str(int(wait_s) + 1)
        return response
    principal = await asyncio.to_thread(auth.authenticate, token, settings.portal.admin_token, request.app[ENGINE])
    if principal is None:
        limiter.failed(client, now)
        raise ApiError(401, "invalid or revoked token")  # a right token later does not clear it
    if principal.scope == "produce":
        raise ApiError(403, "a produce token may only write records through the gateway; use a read or admin token")
    if request.method not in ("GET", "HEAD") and not principal.admin:
        raise ApiError(403, "this token may only read; an admin token is needed to change anything")
    request[PRINCIPAL] = principal
    return await handler(request)


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.monotonic()
    response = await handler(request)
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
    m = request.app[METRICS]
    m["requests"].labels(request.method, route, str(response.status)).inc()
    m["latency"].labels(route).observe(time.monotonic() - started)
    return response


def _http_message(request: web.Request, exc: web.HTTPException) -> str:
    """What a 404 or 405 of the router says: the path, and where the right one is found."""
    path = request.path if len(request.path) <= 200 else request.path[:200] + "…"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return f"{request.method} is not allowed on {path}; use {' or '.join(sorted(exc.allowed_methods))}"
    if isinstance(exc, web.HTTPNotFound) and path.startswith("/api/"):
        return f"no route {path}; GET /api/v1/openapi.json lists the API's routes"
    return exc.reason


def too_large(limit: int) -> str:
    """A 413's message: the limit and the setting that holds it (the gateway says the same)."""
    return f"the body is over FERRY_MAX_BODY_BYTES ({limit:,} bytes); send a smaller one or raise that setting"


async def read_json(request: web.Request) -> Any:
    limit = request.app[SETTINGS].portal.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, too_large(limit), "body")
    raw = await request.read()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"body is not valid JSON: {exc}", "body") from None
    except RecursionError:  # "[[[[…" thousands deep: the parser's stack, not the server, gives up
        raise ApiError(400, "body is nested too deeply to read", "body") from None


def actor(request: web.Request) -> str:
    return str(request[PRINCIPAL].name)
