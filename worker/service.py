"""``ferry worker``: the long-running worker process.

Starts the engine and its health/metrics server, then takes partitions from the source: a
static assignment file when given, else ZooKeeper (the coordinator's assignments). SIGTERM or
SIGINT drains gracefully: the source stops taking work (under ZooKeeper it deregisters first so
the leader moves the partitions), every partition is released (in-flight pushes get the drain
timeout, offset state is flushed, waiting for the broker's confirmation at most
:func:`worker.engine.final_write_timeout_ms`), and the process exits 0 — also when Kafka is
unreachable and the final state could not be confirmed (one ``offsets.final_state_unconfirmed``
line says which partitions; the next owner redelivers from their last confirmed state).
"""

from __future__ import annotations

import asyncio
import gc
import signal

from ferry import health, log, runtime
from ferry.config import Settings
from ferry.worker import native
from ferry.worker.engine import Engine

_log = log.get_logger(__name__)
IO_THREADS = 32
"""Threads for blocking calls: restores and start offsets (up to 30 s each), group commits and
ZooKeeper calls; the default pool (cores + 4) let a few slow reads hold up a handoff's ZooKeeper calls."""


def tune_gc() -> None:
    """The push path allocates a few container objects per fetched record, and each record lives
    until its push is acknowledged, while thousands of its peers wait in the windows. CPython
    collects the young generation every 700 net container allocations by default, which visited
    every record in flight dozens of times a second (~7 µs per record, as much as building and
    pushing it; bench/batch.py). Since records are acyclic, the reference counts free them and
    the net allocation count only grows with the buffered population or with cyclic garbage, so
    a young collection every 100,000 net allocations (~100,000 buffered records or a few MB of
    cycles) costs ~1-2 % of the worker's CPU in the batch benchmark, where 10,000 cost 3-6 % and
    a collection on a 1 s timer 3 %. Start-up objects are frozen out of collections first."""
    gc.freeze()
    gc.set_threshold(100_000, 10, 10)


def main(settings: Settings, assignment_file: str | None = None) -> int:
    tune_gc()
    return runtime.run("worker", lambda: serve(settings, assignment_file), threads=IO_THREADS)


async def serve(settings: Settings, assignment_file: str | None) -> int:
    worker_id = settings.worker.resolved_id()
    engine = Engine(settings, worker_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    source_ready = asyncio.Event()
    http, port = await health.start(
        settings.metrics_host,
        settings.worker.metrics_port,
        engine.metrics.registry,
        ready=lambda: engine.started and source_ready.is_set(),
        service="worker",
        port_setting="FERRY_WORKER_METRICS_PORT",
        json_routes={
            "/stats": lambda: {
                "worker": worker_id,
                "partitions": engine.stats(),
                "endpoints": engine.endpoint_stats(),
                "internal": engine.internal_stats(),
            }
        },
    )
    _log.info(
        "worker.starting", worker=worker_id, metrics_port=port, static=bool(assignment_file), native=native.loaded()
    )
    try:
        starting = asyncio.create_task(engine.start())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not starting.done():  # stopped while still waiting for Kafka
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            return 0
        starting.result()
        if assignment_file:
            from ferry.worker import static_source

            source = asyncio.create_task(static_source.run(engine, assignment_file, stop))
            source_ready.set()
        else:
            from ferry.worker import zk_source

            source = asyncio.create_task(
                zk_source.run(engine, settings, worker_id, stop, metrics_url=f"http://{settings.metrics_host}:{port}")
            )
            source_ready.set()
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({source, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if source in done and source.exception() is not None:
            stopper.cancel()
            raise source.exception()  # type: ignore[misc]
        stop.set()
        await source
        stopper.cancel()
        _log.info("worker.draining", worker=worker_id, partitions=len(engine.owned()))
        await engine.stop()
        return 0
    finally:
        await http.cleanup()
        _log.info("worker.stopped", worker=worker_id)
