"""Run a service's event loop: uvloop, a pool for blocking calls, and an exit that cannot hang.

Use case: every long-running service (worker, gateway, coordinator, portal) ends its ``main`` with
:func:`run`. Blocking calls (ZooKeeper, Kafka metadata, the metadata database) run in the loop's
default executor, the pool given here; a service that stops while one of them waits for a server
that is gone would otherwise never exit, because closing a loop waits for every thread of that pool.

States: running (``serve`` runs on the loop) → draining (``serve`` returned or raised: the pool takes
no new calls and its threads get :data:`EXIT_S` to finish) → closed (the loop is closed and the
code returned), or abandoned (a call is still running after the bound: logged, and the process
ends with ``os._exit`` and the same code, leaving the call behind).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ferry import log

_log = log.get_logger(__name__)
EXIT_S = 2.0
"""How long an ending service waits for blocking calls still under way in its pool."""


def new_runner() -> asyncio.Runner:
    """An asyncio runner on uvloop (less CPU per socket event than the default loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def run(
    service: str,
    serve: Callable[[], Coroutine[Any, Any, int]],
    threads: int | None = None,
    exit_s: float = EXIT_S,
) -> int:
    """Run ``serve()`` to its end with a pool of ``threads`` (Python's default size when None) as
    the loop's default executor; the exit code it returns (1 if it raised, after the error)."""
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"ferry-{service}-io")
    runner = new_runner()
    code = 1
    try:
        runner.get_loop().set_default_executor(pool)
        code = runner.run(serve())
    finally:
        # The stop was graceful and bounded. A blocking call still running in the pool now waits
        # for a service that is gone (ZooKeeper, Kafka or the database unreachable) and may never
        # return: closing the loop and the interpreter would wait for it forever.
        stuck = drain(pool, exit_s)
        if stuck:
            error = sys.exc_info()[1]
            _log.warning(
                f"{service}.exit_abandoning_calls",
                calls=stuck,
                hint="ZooKeeper, Kafka or the metadata database unreachable",
                error=None if error is None else repr(error),
            )
            logging.shutdown()
            os._exit(code)
        runner.close()
    return code


def drain(pool: ThreadPoolExecutor, timeout_s: float) -> int:
    """Stop ``pool`` and wait up to ``timeout_s`` for its threads; how many are still running."""
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + timeout_s
    threads = list(getattr(pool, "_threads", ()))
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return sum(t.is_alive() for t in threads)
