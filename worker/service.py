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
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ferry import health, log
from ferry.config import Settings
from ferry.worker import native
from ferry.worker.engine import Engine

_log = log.get_logger(__name__)
IO_THREADS = 32
POOL_EXIT_S = 2.0
"""How long an ending worker waits for blocking calls still under way in its pool."""


def _runner() -> asyncio.Runner:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


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
    pool = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="ferry-io")
    runner = _runner()
    code = 1
    try:
        code = runner.run(serve(settings, assignment_file, pool))
    finally:
        # The stop was graceful and bounded. A blocking call still running in the pool now waits
        # for a service that is gone (ZooKeeper or Kafka unreachable) and may never return: closing
        # the loop and the interpreter would wait for it forever, so the process ends without it.
        stuck = _drain(pool, POOL_EXIT_S)
        if stuck:
            error = sys.exc_info()[1]
            _log.warning(
                "worker.exit_abandoning_calls",
                calls=stuck,
                hint="ZooKeeper or Kafka unreachable",
                error=None if error is None else repr(error),
            )
            logging.shutdown()
            os._exit(code)
        runner.close()
    return code


def _drain(pool: ThreadPoolExecutor, timeout_s: float) -> int:
    """Stop ``pool`` and wait up to ``timeout_s`` for its threads; how many are still running."""
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + timeout_s
    threads = list(getattr(pool, "_threads", ()))
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return sum(t.is_alive() for t in threads)


async def serve(settings: Settings, assignment_file: str | None, pool: ThreadPoolExecutor) -> int:
    worker_id = settings.worker.resolved_id()
    engine = Engine(settings, worker_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Blocking Kafka reads (restores, start offsets: up to 30 s each), group commits and ZooKeeper
    # calls all run in threads; the default pool (cores + 4 threads) let a few slow reads hold up
    # the ZooKeeper calls of a handoff.
    loop.set_default_executor(pool)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    source_ready = asyncio.Event()
    http, port = await health.start(
        settings.metrics_host,
        settings.worker.metrics_port,
        engine.metrics.registry,
        ready=lambda: engine.started and source_ready.is_set(),
        service="worker",
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
