"""The small HTTP server every long-running service exposes: ``/metrics``, ``/healthz``, ``/readyz``.

``/healthz`` answers while the process's event loop runs (liveness); ``/readyz`` answers 200 only
when the service says it is ready (e.g. connected to ZooKeeper and owning what it was told to),
else 503 (readiness). Extra JSON routes (a worker's live partition figures) can be added.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ferry import log
from ferry.errors import ConfigError

_log = log.get_logger(__name__)


def listen_refused(exc: OSError, host_setting: str, host: str, port_setting: str, port: int) -> ConfigError:
    """A service's listening address refused by the system (a port taken or not allowed, an address
    that is not this machine's) as the setting to change, instead of a traceback."""
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else str(exc)
    where = f"cannot listen on {host}:{port}: {reason}"
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(host_setting, f"{where}; give an address of this machine (0.0.0.0 for all of them)")
    return ConfigError(port_setting, f"{where}; give a free port ({port_setting}=0 picks one)")


async def start(
    host: str,
    port: int,
    registry: CollectorRegistry,
    ready: Callable[[], bool],
    service: str,
    json_routes: dict[str, Callable[[], Any]] | None = None,
    port_setting: str = "",
    host_setting: str = "FERRY_METRICS_HOST",
) -> tuple[web.AppRunner, int]:
    """Start the server; returns its runner (``await runner.cleanup()`` to stop) and bound port.
    An address it cannot listen on is a :class:`ConfigError` naming ``port_setting`` or
    ``host_setting``."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "service": service})

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        return web.json_response({"ready": ok, "service": service}, status=200 if ok else 503)

    def json_handler(fn: Callable[[], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(_: web.Request) -> web.Response:
            return web.json_response(fn())

        return handle

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    for path, fn in (json_routes or {}).items():
        app.router.add_get(path, json_handler(fn))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise listen_refused(exc, host_setting, host, port_setting, port) from None
    bound = runner.addresses[0][1] if runner.addresses else port
    _log.info("health.listening", service=service, host=host, port=bound)
    return runner, bound
