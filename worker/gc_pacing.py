"""Garbage collection paced by time instead of by allocation count.

Use case: the worker's push path allocates a few container objects per record (the record, its
header list, batch bookkeeping), and each lives until its push is acknowledged: tens to hundreds
of milliseconds, during which thousands of its peers are alive in the windows. CPython's
collector starts a young collection every N container allocations, so at tens of thousands of
records a second it runs dozens of times a second and visits every record still in flight each
time; with the default threshold it cost ~7 µs per record, and still ~25 % of the worker's CPU
at 10,000 (bench/batch.py, GC on vs off). Collected once a second instead, a collection visits
only the records alive at that moment; the ones acknowledged in between were freed by their
reference counts and are never visited. Cyclic garbage (rare on the push path: exceptions,
cancelled tasks) waits at most a second.

Schedule: automatic collection off; generation 0 every ``YOUNG_EVERY_S``, generation 1 every
``MIDDLE_EVERY``-th time, a full collection every ``FULL_EVERY``-th time. Objects created at
start-up (imports, settings) are frozen out of every collection first. When :func:`run` ends
(the worker stops) automatic collection is switched back on.
"""

from __future__ import annotations

import asyncio
import gc

YOUNG_EVERY_S = 1.0
MIDDLE_EVERY = 10
FULL_EVERY = 300


def generation(tick: int) -> int:
    """Which generation the ``tick``-th collection (from 1) covers."""
    if tick % FULL_EVERY == 0:
        return 2
    if tick % MIDDLE_EVERY == 0:
        return 1
    return 0


def freeze_start_up() -> None:
    gc.freeze()


async def run(every_s: float = YOUNG_EVERY_S) -> None:
    """Collect on a timer until cancelled."""
    gc.disable()
    tick = 0
    try:
        while True:
            await asyncio.sleep(every_s)
            tick += 1
            gc.collect(generation(tick))
    finally:
        gc.enable()
