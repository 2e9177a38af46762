"""Health at a glance (docs/api.md, "Health and history"): a badge and the current figures per
subscription, and the last hour of a subscription's lag and rates, from the portal's samples
(:mod:`ferry.portal.history`, kept by :mod:`ferry.portal.history_store`)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from ferry import db
from ferry.clock import now_ms
from ferry.portal.history import HISTORY_S, health
from ferry.portal.http import ENGINE, HISTORY, OPS


async def overview(request: web.Request) -> web.Response:
    history = request.app[HISTORY]

    def read() -> list[dict[str, Any]]:
        subs = db.load_subscriptions(request.app[ENGINE])
        return history.summaries([(s.name, s.state) for s in subs], now_ms())

    return web.json_response({"interval_s": history.interval_s, "subscriptions": await asyncio.to_thread(read)})


async def subscription_history(request: web.Request) -> web.Response:
    sub = await asyncio.to_thread(request.app[OPS].subscription, request.match_info["name"])
    history = request.app[HISTORY]
    now = now_ms()
    points, parts = await asyncio.to_thread(history.hour, sub.name, now)
    return web.json_response(
        {
            "name": sub.name,
            "interval_s": history.interval_s,
            "span_s": HISTORY_S,
            "health": health(sub.state, points, now),
            "points": [p.doc() for p in points],
            "partitions": [
                {
                    "topic": ref.topic,
                    "partition": ref.partition,
                    "cluster": ref.cluster,
                    "points": [
                        {"t": p.t_ms, "lag": p.lag, "delivered_per_s": round(p.delivered_per_s, 2)} for p in points
                    ],
                }
                for ref, points in sorted(parts.items())
            ],
        }
    )


def routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/health", overview)
    app.router.add_get("/api/v1/subscriptions/{name}/history", subscription_history)
