"""``ferry coordinator``: one of any number of coordinators; the elected one leads.

The election runs in its own thread (kazoo's Election recipe blocks); the event loop serves
``/metrics``, ``/healthz`` and ``/readyz`` (ready = connected to ZooKeeper, leading or standing
by). SIGTERM/SIGINT: stop leading (the next coordinator takes over at once because this one
leaves the election), close the session, exit 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading

from kazoo.client import KazooState

from ferry import health, log, runtime, zkpaths
from ferry.config import Settings
from ferry.coordinator.catalog import Catalog
from ferry.coordinator.leader import Leader
from ferry.coordinator.metrics import CoordinatorMetrics
from ferry.zk import CLOSE_S, close_within, make_client
from ferry.zk import start as zk_start

_log = log.get_logger(__name__)


def main(settings: Settings) -> int:
    return runtime.run("coordinator", lambda: serve(settings))


async def serve(settings: Settings) -> int:
    coordinator_id = f"{socket.gethostname()}-{os.getpid()}"
    metrics = CoordinatorMetrics()
    zk = make_client(settings)
    catalog = Catalog(settings.database.url, settings.coordinator.subscription_poll_ms)
    leader = Leader(zk, settings, coordinator_id, catalog, metrics)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    http, port = await health.start(
        settings.metrics_host,
        settings.coordinator.metrics_port,
        metrics.registry,
        ready=lambda: zk.state == KazooState.CONNECTED,
        service="coordinator",
        port_setting="FERRY_COORDINATOR_METRICS_PORT",
        json_routes={"/status": lambda: {"id": coordinator_id, "leading": leader.leading}},
    )
    waiting = threading.Event()
    connect = asyncio.ensure_future(asyncio.to_thread(zk_start, zk, settings, waiting))
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connect, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():  # asked to stop while still waiting for ZooKeeper
        waiting.set()
        stopped.cancel()
        await asyncio.to_thread(close_within, zk)
        await http.cleanup()
        _log.info("coordinator.stopped", coordinator=coordinator_id, connected=False)
        return 0
    stopped.cancel()
    election = zk.Election(zkpaths.election(settings.cluster), identifier=coordinator_id)

    def campaign() -> None:
        while not leader.stopping.is_set():
            try:
                election.run(leader.run)
            except Exception as exc:
                if leader.stopping.is_set():
                    return
                _log.warning("election.retry", error=repr(exc))
                leader.stopping.wait(1.0)

    thread = threading.Thread(target=campaign, name="ferry-election", daemon=True)
    thread.start()
    _log.info("coordinator.started", coordinator=coordinator_id, metrics_port=port)
    try:
        await stop.wait()
    finally:
        leader.stopping.set()
        leader._dirty.set()
        election.cancel()
        await asyncio.to_thread(thread.join, 10)
        if not await asyncio.to_thread(close_within, zk):
            _log.warning("coordinator.zk_close_timeout", seconds=CLOSE_S)  # its session expires on the server
        catalog.close()
        await http.cleanup()
        _log.info("coordinator.stopped", coordinator=coordinator_id)
    return 0
