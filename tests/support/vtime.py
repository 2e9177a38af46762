"""Virtual time for in-process tests of timers: an event loop whose clock jumps to the next timer
whenever nothing is ready, so minutes of back-off run in milliseconds and in a fixed order.

Use: ``run(main())`` instead of ``asyncio.run(main())``; inside, ``asyncio.get_running_loop().time()``
is the virtual clock (seconds from 0). Only for code whose I/O is in-memory fakes: a real socket
would never become ready while the clock jumps past its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        ready: Any = self._ready  # type: ignore[attr-defined]
        scheduled: Any = self._scheduled  # type: ignore[attr-defined]
        if not ready and scheduled:
            when = scheduled[0]._when
            if when > self._virtual_now:
                self._virtual_now = when
        super()._run_once()  # type: ignore[misc]


def run(main: Coroutine[Any, Any, T]) -> T:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.close()
