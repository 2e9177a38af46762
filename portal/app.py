"""The portal's aiohttp application: assembles the middlewares of :mod:`ferry.portal.http` and the
route modules, and owns the database engine and the cluster client for the application's lifetime.
Blocking work (database, ZooKeeper, Kafka) runs in threads so one slow call never stalls the others.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from ferry import db, log
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.guessing import FailedLogins
from ferry.portal import api_admin, api_health, api_internal, api_ops, api_subscriptions, openapi, ui
from ferry.portal.cluster import Cluster
from ferry.portal.history_store import HistoryStore
from ferry.portal.http import (
    CLUSTER,
    ENGINE,
    HISTORY,
    LOGINS,
    METRICS,
    OPS,
    SETTINGS,
    auth_middleware,
    csrf_middleware,
    errors_middleware,
    metrics_middleware,
)
from ferry.portal.ops import Operations

__all__ = ["LOGINS", "create_app"]

_log = log.get_logger(__name__)


async def sample_history(app: web.Application) -> None:
    """In every history interval: what the workers report, into the history (the health badges
    and charts), unless another portal replica took this interval's sample. A failed sample is a
    gap in the charts, logged once until sampling works again."""
    history, cluster = app[HISTORY], app[CLUSTER]
    failing = False
    while True:
        await asyncio.sleep(history.seconds_to_next_bucket(now_ms()) + random.uniform(0, history.interval_s / 10))
        at = now_ms()
        try:
            if not await asyncio.to_thread(history.taken, at):
                stats = await asyncio.to_thread(cluster.worker_stats)
                await asyncio.to_thread(history.record, at, stats)
            if failing:
                _log.info("portal.history_sampling_resumed")
            failing = False
        except Exception as exc:  # ZooKeeper or the database away: a gap in the charts, not a crash
            if not failing:
                _log.warning("portal.history_sample_failed", error=str(exc)[:300])
            failing = True


def create_app(settings: Settings, cluster: Cluster | None = None) -> web.Application:
    app = web.Application(
        middlewares=[metrics_middleware, errors_middleware, csrf_middleware, auth_middleware],
        client_max_size=settings.portal.max_body_bytes,
    )
    app[SETTINGS] = settings
    app[ENGINE] = db.make_engine(settings.database.url)
    app[CLUSTER] = cluster or Cluster(settings)
    app[OPS] = Operations(app[ENGINE], app[CLUSTER])
    app[LOGINS] = FailedLogins()
    replica = f"{socket.gethostname()}:{settings.portal.port}"
    app[HISTORY] = HistoryStore(app[ENGINE], settings.portal.history_interval_ms / 1000, replica)
    registry = CollectorRegistry()
    app[METRICS] = {
        "registry": registry,
        "requests": Counter(
            "ferry_portal_requests", "Portal requests.", ["method", "route", "status"], registry=registry
        ),
        "latency": Histogram("ferry_portal_request_seconds", "Portal request latency.", ["route"], registry=registry),
    }

    health: dict[str, Any] = {"checked": 0.0, "problem": None}

    async def healthz(request: web.Request) -> web.Response:
        """Readiness: the database answers with the expected schema (checked at most every 2 s)."""
        now = time.monotonic()
        if now - float(health["checked"] or 0) > 2.0:
            health["problem"] = await asyncio.to_thread(db.schema_problem, request.app[ENGINE])
            health["checked"] = now
        if health["problem"]:
            return web.json_response(
                {"status": "unavailable", "service": "portal", "reason": health["problem"]}, status=503
            )
        return web.json_response({"status": "ok", "service": "portal"})

    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(request.app[METRICS]["registry"])
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    api_subscriptions.routes(app)
    api_ops.routes(app)
    api_health.routes(app)
    api_admin.routes(app)
    api_internal.routes(app)
    openapi.routes(app)
    ui.setup(app)

    sampler: list[asyncio.Task[None]] = []

    async def on_startup(app: web.Application) -> None:
        await asyncio.to_thread(app[CLUSTER].start)
        sampler.append(asyncio.create_task(sample_history(app)))

    async def on_cleanup(app: web.Application) -> None:
        for task in sampler:
            task.cancel()
        await asyncio.gather(*sampler, return_exceptions=True)
        await asyncio.to_thread(app[CLUSTER].stop)
        app[ENGINE].dispose()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
