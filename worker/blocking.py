"""Blocking client calls that may hang, run so that nobody has to wait for them past a bound.

``asyncio.to_thread`` runs a call in the event loop's executor, whose threads are joined when the
loop shuts down and again at interpreter exit: one librdkafka call stuck on an unreachable broker
(a group commit waits up to ``session.timeout.ms``, 45 s, for a coordinator; a consumer's close
waits for that commit) would hold up the process's exit. Here each call gets its own daemon
thread instead: the caller waits for it with a timeout, and a call left behind keeps running
without holding up anything (daemon threads are not joined at exit, and the client object stays
referenced by the thread, so it is not destroyed, which would wait again, under the exiting
interpreter).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ferry import log

_log = log.get_logger(__name__)
T = TypeVar("T")


def in_daemon_thread(fn: Callable[..., T], *args: Any, name: str = "ferry-blocking") -> asyncio.Future[T]:
    """Start ``fn(*args)`` in a new daemon thread; the returned future (of the running loop) gets
    its result. Cancelling the future, or giving up waiting for it, abandons the call, not stops it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = fn(*args)
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for this any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


async def close_within(closers: Mapping[str, Callable[[], object]], timeout_s: float) -> list[str]:
    """Run every blocking close at once, each in its own daemon thread, and wait at most
    ``timeout_s`` for all of them. Returns the names of those still running (left behind); a close
    that raised counts as done."""
    if not closers:
        return []
    futs = {in_daemon_thread(close, name=f"ferry-close-{name}"): name for name, close in closers.items()}
    done, pending = await asyncio.wait(futs, timeout=max(0.0, timeout_s))
    for fut in done:
        exc = fut.exception()
        if exc is not None:
            _log.warning("client.close_failed", client=futs[fut], error=str(exc))
    for fut in pending:
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())
    return sorted(futs[f] for f in pending)
