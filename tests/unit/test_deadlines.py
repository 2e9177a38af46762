"""One sweep expires many waits: table tests on a fake loop and clock, then real futures."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from ferry import deadlines
from ferry.deadlines import Deadlines, time_out


class FakeLoop:
    """Records ``call_later``; the test runs the sweep by hand."""

    def __init__(self) -> None:
        self.later: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.later.append((delay, fn))

    def is_closed(self) -> bool:
        return False


class Wait:
    def __init__(self, name: str) -> None:
        self.name = name
        self.settled = False


def make(now: list[float]) -> tuple[FakeLoop, Deadlines[Wait], list[str]]:
    loop = FakeLoop()
    expired: list[str] = []
    d: Deadlines[Wait] = Deadlines(
        loop,  # type: ignore[arg-type]
        lambda w: w.settled,
        lambda w: expired.append(w.name),
        sweep_s=0.1,
        clock=lambda: now[0],
    )
    return loop, d, expired


@pytest.mark.parametrize(
    ("deadlines_s", "settled", "sweeps_at", "expired_after_each"),
    [
        # one wait, swept before and after its deadline
        ([0.25], [], [0.1, 0.2, 0.3], [[], [], ["a"]]),
        # a settled wait is dropped, never expired
        ([0.15, 0.15], ["a"], [0.1, 0.2], [[], ["b"]]),
        # exactly at its deadline counts as past it
        ([0.2], [], [0.2], [["a"]]),
        # several expire in one sweep, in the order watched
        ([0.05, 0.3, 0.01], [], [0.1, 0.4], [["a", "c"], ["a", "c", "b"]]),
    ],
)
def test_the_sweep_expires_what_is_late_once(
    deadlines_s: list[float], settled: list[str], sweeps_at: list[float], expired_after_each: list[list[str]]
) -> None:
    now = [0.0]
    loop, d, expired = make(now)
    waits = [Wait(chr(ord("a") + i)) for i in range(len(deadlines_s))]
    for w, at in zip(waits, deadlines_s, strict=True):
        d.watch(w, at)
    assert len(loop.later) == 1  # one sweep scheduled, however many waits
    for w in waits:
        w.settled = w.name in settled
    for at, want in zip(sweeps_at, expired_after_each, strict=True):
        now[0] = at
        d.sweep()
        assert expired == want


def test_the_sweep_stops_when_nothing_waits_and_starts_again() -> None:
    now = [0.0]
    loop, d, expired = make(now)
    w = Wait("a")
    d.watch(w, 0.05)
    now[0] = 0.1
    loop.later.pop()[1]()
    assert expired == ["a"] and loop.later == [] and len(d) == 0  # no sweep is scheduled again
    d.watch(Wait("b"), 1.0)
    assert len(loop.later) == 1 and loop.later[0][0] == pytest.approx(0.1)


def test_time_out_raises_in_the_awaiter_and_settles_nothing_twice() -> None:
    async def run() -> tuple[float, Any]:
        loop = asyncio.get_running_loop()
        late: asyncio.Future[int] = loop.create_future()
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await time_out(late, 0.15)
        waited = time.monotonic() - started
        # Whoever would have resolved it finds it done (as a delivery callback checks).
        assert late.done()
        on_time: asyncio.Future[int] = loop.create_future()
        loop.call_soon(on_time.set_result, 7)
        return waited, await time_out(on_time, 5)

    waited, value = asyncio.run(run())
    assert 0.15 <= waited < 0.15 + 3 * deadlines.SWEEP_S
    assert value == 7


def test_a_timed_out_future_nobody_awaits_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def run() -> None:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        time_out(fut, 0.01)
        await asyncio.wait([fut], timeout=5)  # retrieves nothing
        assert fut.done()
        del fut

    asyncio.run(run())
    gc.collect()
    assert "never retrieved" not in caplog.text


def test_the_registry_keeps_no_loop_alive() -> None:
    """Every asyncio.run() makes a loop (tests make thousands): a loop whose waits are over, or
    that closed with some left, is not kept."""

    async def run(settle: bool) -> weakref.ref[asyncio.AbstractEventLoop]:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        time_out(fut, 0.01 if settle else 60)
        if settle:
            await asyncio.wait([fut], timeout=5)
            await asyncio.sleep(2 * deadlines.SWEEP_S)  # the sweep after finds nothing waiting
        return weakref.ref(asyncio.get_running_loop())

    over = asyncio.run(run(settle=True))
    gc.collect()
    assert over() is None
    left = asyncio.run(run(settle=False))  # closed with a wait left: forgotten at the next loop's
    asyncio.run(run(settle=True))
    gc.collect()
    assert left() is None and deadlines._of_loop == {}
