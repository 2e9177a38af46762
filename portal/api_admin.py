"""Admin routes: API tokens (stored hashed, shown once) and the audit log."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aiohttp import web

from ferry import db
from ferry.digits import ascii_digits
from ferry.portal.http import ENGINE, PRINCIPAL, ApiError, actor, read_json

_PATTERN = re.compile(r"[A-Za-z0-9._*-]{1,249}")


def _token(row: db.ApiToken) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "scope": row.scope,
        "topics": row.topics,
        "created_by": row.created_by,
        "created_at": row.created_at.isoformat() + "Z",
        "revoked_at": row.revoked_at.isoformat() + "Z" if row.revoked_at else None,
        "last_used_at": row.last_used_at.isoformat() + "Z" if row.last_used_at else None,
    }


def _admin(request: web.Request) -> None:
    if not request[PRINCIPAL].admin:
        raise ApiError(403, "only admin tokens may manage tokens or read the audit log")


async def list_tokens(request: web.Request) -> web.Response:
    _admin(request)

    def read() -> list[dict[str, Any]]:
        with db.session(request.app[ENGINE]) as s:
            return [_token(t) for t in db.list_tokens(s)]

    return web.json_response({"tokens": await asyncio.to_thread(read)})


async def create_token(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, "must be a JSON object", "body")
    name = body.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 100:
        raise ApiError(400, "is required: 1-100 characters naming who uses the token", "name")
    scope = body.get("scope", "read")
    if scope not in db.SCOPES:
        raise ApiError(400, "must be 'admin', 'read' or 'produce'", "scope")
    topics = produce_topics(scope, body.get("topics"))

    def store() -> dict[str, Any]:
        with db.session(request.app[ENGINE]) as s:
            row, plain = db.create_token(s, name, scope, actor(request), topics)
            db.audit(s, actor(request), "token.create", name, {"scope": scope, "id": row.id, "topics": topics})
            return {**_token(row), "token": plain}

    return web.json_response(await asyncio.to_thread(store), status=201)


def produce_topics(scope: str, raw: Any) -> list[str] | None:
    """A ``produce`` token's topic patterns: 1–100 patterns of topic-name characters and ``*``."""
    if scope != "produce":
        if raw is not None:
            raise ApiError(400, "only produce tokens have topics", "topics")
        return None
    if not isinstance(raw, list) or not 1 <= len(raw) <= 100:
        raise ApiError(400, 'a produce token needs 1-100 topic patterns, e.g. ["orders", "billing.*"]', "topics")
    for i, pattern in enumerate(raw):
        if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
            raise ApiError(400, "a topic name, or a pattern where * matches any run of characters", f"topics[{i}]")
    return list(raw)


async def revoke_token(request: web.Request) -> web.Response:
    raw = request.match_info["id"]
    if not ascii_digits(raw) or not 0 < int(raw) < 2**31:  # ids are 32-bit database integers
        raise ApiError(404, "no such token", "id")

    def revoke() -> None:
        with db.session(request.app[ENGINE]) as s:
            row = s.get(db.ApiToken, int(raw))
            if row is None:
                raise ApiError(404, "no such token", "id")
            if row.revoked_at is None:
                row.revoked_at = db.utcnow()
                db.audit(s, actor(request), "token.revoke", row.name, {"id": row.id})

    await asyncio.to_thread(revoke)
    return web.Response(status=204)


async def audit_log(request: web.Request) -> web.Response:
    _admin(request)
    raw = request.query.get("limit", "100")
    if not ascii_digits(raw) or not 1 <= int(raw) <= 1000:
        raise ApiError(400, "must be an integer between 1 and 1000", "limit")

    def read() -> list[dict[str, Any]]:
        with db.session(request.app[ENGINE]) as s:
            return [
                {
                    "id": e.id,
                    "at": e.at.isoformat() + "Z",
                    "actor": e.actor,
                    "action": e.action,
                    "target": e.target,
                    "detail": e.detail,
                }
                for e in db.recent_audit(s, int(raw))
            ]

    return web.json_response({"entries": await asyncio.to_thread(read)})


def routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/tokens", list_tokens)
    app.router.add_post("/api/v1/tokens", create_token)
    app.router.add_delete("/api/v1/tokens/{id}", revoke_token)
    app.router.add_get("/api/v1/audit", audit_log)
