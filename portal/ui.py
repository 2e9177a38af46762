"""The web UI: a static single-page app (``portal/static``) served at ``/`` by the portal itself.

Plain HTML, CSS and JavaScript files, no build step and nothing loaded from elsewhere, so the
strict Content-Security-Policy (``script-src 'self'``) holds. The page asks for a token and
calls the same REST API with ``Authorization: Bearer``.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

STATIC = Path(__file__).resolve().parent / "static"


async def index(_: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


def setup(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC, show_index=False)
