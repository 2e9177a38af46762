"""Read routes over Ferry's own work: ``GET /api/v1/delays`` and ``GET /api/v1/transactions``."""

from __future__ import annotations

import asyncio

from aiohttp import web

from ferry.clock import now_ms
from ferry.portal import internal_view
from ferry.portal.http import CLUSTER, ApiError


async def delays(request: web.Request) -> web.Response:
    docs = await asyncio.to_thread(request.app[CLUSTER].worker_docs)
    return web.json_response(internal_view.delays(docs))


async def transactions(request: web.Request) -> web.Response:
    state = request.query.get("state", "prepared")
    if state != "prepared":
        raise ApiError(400, "only state=prepared is listed (committed and rolled back ones are final)", "state")
    docs = await asyncio.to_thread(request.app[CLUSTER].worker_docs)
    return web.json_response(internal_view.transactions(docs, now_ms()))


def routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/delays", delays)
    app.router.add_get("/api/v1/transactions", transactions)
