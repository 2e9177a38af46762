"""Deadlines for many waits on one event loop, checked by one sweep instead of a timer each.

Use case: the gateway waits for Kafka's acknowledgements of every request and transaction step,
each with a deadline (``produce_timeout_ms``, the transaction log's timeout). ``asyncio.wait_for``
or a loop timer per wait costs about ten futures (3.5 against 0.3 µs on uvloop) — several percent
of a transaction — while a deadline of seconds needs no precision finer than a tenth of one. Here
a wait is appended to a list; while any is listed, one sweep every ``sweep_s`` drops the settled
ones and expires those past their deadline. A wait is expired at most ``sweep_s`` late.

States of one wait: watched → settled (dropped by the next sweep) or expired (``expire`` called
once, at the first sweep past its deadline). The sweep runs only while waits are watched.

Loop thread only: :meth:`Deadlines.watch` and the sweep run on the loop given to the constructor.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Generic, TypeVar

T = TypeVar("T")
F = TypeVar("F", bound="asyncio.Future[Any]")

SWEEP_S = 0.1
"""How often watched deadlines are checked: a wait expires at most this late."""


class Deadlines(Generic[T]):
    """Expire watched items whose deadline passed before ``settled(item)`` became true."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        settled: Callable[[T], bool],
        expire: Callable[[T], None],
        sweep_s: float = SWEEP_S,
        clock: Callable[[], float] = time.monotonic,
        idle: Callable[[], object] | None = None,
    ) -> None:
        """``idle``: called when a sweep finds nothing left waiting."""
        self._loop = loop
        self._idle = idle
        self._settled = settled
        self._expire = expire
        self._sweep_s = sweep_s
        self._clock = clock
        self._watched: list[tuple[float, T]] = []
        self._sweeping = False

    def __len__(self) -> int:
        """How many waits the next sweep looks at (settled ones included until then)."""
        return len(self._watched)

    def watch(self, item: T, deadline: float) -> None:
        """Expire ``item`` at ``deadline`` (on the constructor's clock) unless it is settled by
        then; costs a list append."""
        self._watched.append((deadline, item))
        if not self._sweeping:
            self._schedule()

    def sweep(self) -> None:
        """Drop the settled waits, expire the late ones; again in ``sweep_s`` while any wait."""
        now = self._clock()
        waiting = []
        for deadline, item in self._watched:
            if self._settled(item):
                continue
            if deadline <= now:
                self._expire(item)
            else:
                waiting.append((deadline, item))
        self._watched = waiting
        self._sweeping = False
        if waiting:
            self._schedule()
        elif self._idle is not None:
            self._idle()

    def _schedule(self) -> None:
        if not self._loop.is_closed():
            self._sweeping = True
            self._loop.call_later(self._sweep_s, self.sweep)


_of_loop: dict[asyncio.AbstractEventLoop, Deadlines[asyncio.Future[Any]]] = {}
"""The deadlines of futures, per loop. A loop's entry leaves when its sweep finds nothing waiting,
or, for a loop closed with waits left, at the next :func:`time_out` on another loop (a test run
makes thousands of loops: none is kept)."""


def time_out(fut: F, timeout_s: float) -> F:
    """(On ``fut``'s loop.) ``fut`` itself, which gets :class:`TimeoutError` — as
    ``asyncio.wait_for`` would raise in its awaiter — unless it is done within ``timeout_s`` (up to
    :data:`SWEEP_S` later). Unlike ``wait_for``, nothing is cancelled: the caller awaits ``fut``,
    and whoever would have resolved it later finds it done."""
    loop = fut.get_loop()
    deadlines = _of_loop.get(loop)
    if deadlines is None:
        for closed in [other for other in _of_loop if other.is_closed()]:
            del _of_loop[closed]
        deadlines = _of_loop[loop] = Deadlines(loop, _done, _time_out, idle=partial(_of_loop.pop, loop, None))
    deadlines.watch(fut, time.monotonic() + timeout_s)
    return fut


def _done(fut: asyncio.Future[Any]) -> bool:
    return fut.done()


def _time_out(fut: asyncio.Future[Any]) -> None:
    fut.set_exception(TimeoutError())
    fut.exception()  # retrieved: an awaiter that was cancelled meanwhile leaves no "never retrieved" log
