"""Subscription registry routes (docs/contract.md §3): list, create, read, replace, delete, pause, resume.

Every write is validated by the one shared parser (:func:`ferry.subscription.parse`), audited,
and announced to the coordinator by touching ``subscriptions-changed`` in ZooKeeper (if
ZooKeeper is down the write still succeeds; the coordinator also polls the database).
``?dry_run=true`` on a create or replace runs every check and answers what would be stored,
storing nothing (``ferry apply`` checks all its documents this way before it changes any).
Endpoint header values are write-only: responses show them masked, and sending ``***`` back
keeps the stored value.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa
from aiohttp import web

from ferry import db, log
from ferry.netguard import EndpointPolicy
from ferry.portal.http import CLUSTER, ENGINE, OPS, SETTINGS, ApiError, actor, read_json
from ferry.subscription import Subscription, parse

_log = log.get_logger(__name__)


def _parse(request: web.Request, body: Any, previous: Subscription | None = None) -> Subscription:
    """The shared parser, with the Kafka clusters this deployment configures."""
    return parse(body, previous=previous, clusters=request.app[SETTINGS].kafka.cluster_names())


def _doc(sub: Subscription) -> dict[str, Any]:
    return sub.to_doc(mask_secrets=True)


def _dry_run(request: web.Request) -> bool:
    raw = request.query.get("dry_run", "false").lower()
    if raw not in ("true", "false", "1", "0"):
        raise ApiError(400, f"must be true or false, not {raw!r}", "dry_run")
    return raw in ("true", "1")


async def check_endpoint(request: web.Request, sub: Subscription) -> None:
    policy = EndpointPolicy(request.app[SETTINGS].portal.endpoint_allow)
    try:
        await asyncio.to_thread(policy.check_url, sub.endpoint.url)
    except Exception as exc:
        raise ApiError(400, str(exc), "endpoint.url") from None


async def announce(request: web.Request, action: str, name: str) -> None:
    await request.app[OPS].announce(action, name)


def load(s: sa.orm.Session, name: str) -> db.SubscriptionRow:
    row = db.get_row(s, name)
    if row is None:
        raise ApiError(404, f"no subscription named {name!r}", "name")
    return row


async def list_subscriptions(request: web.Request) -> web.Response:
    subs = await asyncio.to_thread(db.load_subscriptions, request.app[ENGINE])
    return web.json_response({"subscriptions": [_doc(s) for s in subs]})


async def create(request: web.Request) -> web.Response:
    dry_run = _dry_run(request)
    sub = _parse(request, await read_json(request))
    await check_endpoint(request, sub)

    def exists() -> bool:
        with db.session(request.app[ENGINE]) as s:
            return db.get_row(s, sub.name) is not None

    if dry_run:
        if await asyncio.to_thread(exists):
            raise ApiError(409, f"a subscription named {sub.name!r} already exists", "name")
        return web.json_response({**_doc(sub), **await _warnings(request, sub)})

    def store() -> None:
        with db.session(request.app[ENGINE]) as s:
            if db.get_row(s, sub.name) is not None:
                raise ApiError(409, f"a subscription named {sub.name!r} already exists", "name")
            db.insert_subscription(s, sub)
            db.audit(s, actor(request), "subscription.create", sub.name, _doc(sub))

    try:
        await asyncio.to_thread(store)
    except sa.exc.IntegrityError:
        raise ApiError(409, f"a subscription named {sub.name!r} already exists", "name") from None
    await announce(request, "create", sub.name)
    _log.info("subscription.created", name=sub.name, by=actor(request))
    return web.json_response({**_doc(sub), **await _warnings(request, sub)}, status=201)


async def _warnings(request: web.Request, sub: Subscription) -> dict[str, Any]:
    """A hint when a topic does not exist (yet): the subscription is kept and starts delivering
    once the topic is created, but a typo would otherwise go unnoticed."""
    try:
        counts = await asyncio.to_thread(request.app[CLUSTER].partition_counts, list(sub.topics))
    except Exception:
        return {}
    missing = [t for t in sub.topics if t not in counts]
    if not missing:
        return {}
    return {
        "warnings": [f"topic {t!r} does not exist (yet): nothing is delivered until it is created" for t in missing]
    }


async def get(request: web.Request) -> web.Response:
    name = request.match_info["name"]

    def read() -> Subscription:
        with db.session(request.app[ENGINE]) as s:
            return load(s, name).to_subscription()

    return web.json_response(_doc(await asyncio.to_thread(read)))


async def replace(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    dry_run = _dry_run(request)
    body = await read_json(request)
    if isinstance(body, dict) and body.setdefault("name", name) != name:
        raise ApiError(400, "the name cannot change; create a new subscription instead", "name")

    def store() -> Subscription:
        with db.session(request.app[ENGINE]) as s:
            row = load(s, name)
            sub = _parse(request, body, row.to_subscription())
            db.update_subscription(s, row, sub)
            db.audit(s, actor(request), "subscription.update", name, _doc(sub))
            return sub

    def validate() -> Subscription:
        with db.session(request.app[ENGINE]) as s:
            return _parse(request, body, load(s, name).to_subscription())

    checked = await asyncio.to_thread(validate)
    await check_endpoint(request, checked)
    if dry_run:
        return web.json_response(_doc(checked))
    sub = await asyncio.to_thread(store)
    await announce(request, "update", name)
    return web.json_response(_doc(sub))


async def delete(request: web.Request) -> web.Response:
    name = request.match_info["name"]

    def remove() -> None:
        with db.session(request.app[ENGINE]) as s:
            s.delete(load(s, name))
            db.forget_history(s, name)
            db.audit(s, actor(request), "subscription.delete", name, {})

    await asyncio.to_thread(remove)
    await announce(request, "delete", name)
    return web.Response(status=204)


async def set_state(request: web.Request, state: str) -> Subscription:
    return await request.app[OPS].set_state(request.match_info["name"], state, actor(request))


async def pause(request: web.Request) -> web.Response:
    return web.json_response(_doc(await set_state(request, "paused")))


async def resume(request: web.Request) -> web.Response:
    return web.json_response(_doc(await set_state(request, "active")))


def routes(app: web.Application) -> None:
    base = "/api/v1/subscriptions"
    app.router.add_get(base, list_subscriptions)
    app.router.add_post(base, create)
    app.router.add_get(base + "/{name}", get)
    app.router.add_put(base + "/{name}", replace)
    app.router.add_delete(base + "/{name}", delete)
    app.router.add_post(base + "/{name}/pause", pause)
    app.router.add_post(base + "/{name}/resume", resume)
