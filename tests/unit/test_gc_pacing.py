"""The worker's time-paced garbage collection: schedule and switching automatic collection off and on."""

from __future__ import annotations

import asyncio
import gc

import pytest

from worker import gc_pacing


@pytest.mark.parametrize(
    ("tick", "generation"),
    [
        (1, 0),
        (gc_pacing.MIDDLE_EVERY - 1, 0),
        (gc_pacing.MIDDLE_EVERY, 1),
        (2 * gc_pacing.MIDDLE_EVERY, 1),
        (gc_pacing.FULL_EVERY, 2),
        (gc_pacing.FULL_EVERY + 1, 0),
        (3 * gc_pacing.FULL_EVERY, 2),
    ],
)
def test_schedule(tick: int, generation: int) -> None:
    assert gc_pacing.generation(tick) == generation


async def test_collects_on_a_timer_and_gives_automatic_collection_back() -> None:
    assert gc.isenabled()
    young_before = gc.get_stats()[0]["collections"]
    task = asyncio.create_task(gc_pacing.run(every_s=0.01))
    try:
        await asyncio.sleep(0)
        assert not gc.isenabled()
        async with asyncio.timeout(5):
            while gc.get_stats()[0]["collections"] < young_before + 3:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert gc.isenabled()
