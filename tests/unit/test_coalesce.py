"""Coalescing asks into rounds of one blocking call each."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ferry.worker.coalesce import Coalesced


async def test_asks_of_one_moment_share_one_call() -> None:
    calls: list[list[int]] = []

    def fetch(keys: list[int]) -> dict[int, int]:
        calls.append(sorted(keys))
        return {k: k * 10 for k in keys}

    c: Coalesced[int, int] = Coalesced(fetch)
    assert await asyncio.gather(*(c.get(k) for k in (1, 2, 3, 2))) == [10, 20, 30, 20]
    assert calls == [[1, 2, 3]]
    assert await c.get(4) == 40
    assert calls == [[1, 2, 3], [4]]


async def test_asks_made_during_a_call_form_the_next_round_and_errors_stay_in_their_round() -> None:
    release = threading.Event()
    calls: list[list[str]] = []

    def fetch(keys: list[str]) -> dict[str, str]:
        calls.append(sorted(keys))
        if keys == ["slow"]:
            release.wait(10)
            raise OSError("broker gone")
        return {k: k.upper() for k in keys}

    c: Coalesced[str, str] = Coalesced(fetch)
    first = asyncio.create_task(c.get("slow"))
    async with asyncio.timeout(5):
        while not calls:  # the first round's call is running
            await asyncio.sleep(0.001)
        later = [asyncio.create_task(c.get(k)) for k in ("a", "b")]
        while len(c._pending) < 2:  # both asks are waiting for the next round
            await asyncio.sleep(0.001)
    release.set()
    with pytest.raises(OSError, match="broker gone"):
        await first
    assert [await t for t in later] == ["A", "B"]
    assert calls == [["slow"], ["a", "b"]]


async def test_a_cancelled_asker_does_not_cancel_the_answer_for_the_next() -> None:
    """A take that is given up (its task cancelled) while its key waits for the round: the next
    take of the same key gets the answer, not the first one's cancellation."""
    release = threading.Event()

    def fetch(keys: list[str]) -> dict[str, str]:
        release.wait(10)
        return {k: k.upper() for k in keys}

    c: Coalesced[str, str] = Coalesced(fetch)
    first = asyncio.create_task(c.get("p"))
    await asyncio.sleep(0)
    first.cancel()
    again = asyncio.create_task(c.get("p"))
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await asyncio.wait_for(again, 10) == "P"


def test_a_call_under_way_does_not_hold_up_the_loop_shutdown() -> None:
    """A worker stopping (SIGTERM) while a restore read waits on an unreachable broker: the read
    runs in a daemon thread, so closing the event loop does not wait out its timeout (the
    default executor's threads are joined at shutdown)."""
    release = threading.Event()
    started = threading.Event()

    def blocked(keys: list[str]) -> dict[str, int]:
        started.set()
        release.wait(8)
        return dict.fromkeys(keys, 0)

    async def main() -> None:
        c: Coalesced[str, int] = Coalesced(blocked)
        asker = asyncio.create_task(c.get("a"))
        while not started.is_set():
            await asyncio.sleep(0.01)
        asker.cancel()

    t0 = time.monotonic()
    try:
        asyncio.run(main())
        assert time.monotonic() - t0 < 5
    finally:
        release.set()
