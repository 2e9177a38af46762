"""``ferry portal``: the REST API and web UI in one aiohttp process."""

from __future__ import annotations

import asyncio
import signal

from aiohttp import web

from ferry import health, log, runtime
from ferry.config import Settings
from ferry.errors import ConfigError
from ferry.portal.app import create_app

_log = log.get_logger(__name__)


def main(settings: Settings) -> int:
    if not settings.portal.admin_token:
        raise ConfigError(
            "FERRY_ADMIN_TOKEN", "is required: the portal refuses to start without a bootstrap admin token"
        )
    from ferry import db

    engine = db.make_engine(settings.database.url)
    try:
        problem = db.schema_problem(engine)
    finally:
        engine.dispose()
    if problem:
        raise ConfigError("FERRY_DB_URL", problem)
    return runtime.run("portal", lambda: serve(settings))


async def serve(settings: Settings) -> int:
    app = create_app(settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.portal.host, settings.portal.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        host, port = settings.portal.host, settings.portal.port
        raise health.listen_refused(exc, "FERRY_PORTAL_HOST", host, "FERRY_PORTAL_PORT", port) from None
    port = runner.addresses[0][1] if runner.addresses else settings.portal.port
    _log.info("portal.listening", host=settings.portal.host, port=port, url=f"http://{settings.portal.host}:{port}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        _log.info("portal.stopped")
    return 0
