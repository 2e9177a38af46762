"""Watermark stall (worker.stall): seconds the head of a partition has held its progress."""

from __future__ import annotations

import pytest

from worker.stall import Stall

# Each case: observations (committed, working, now) in order, and the figure after each.
CASES = {
    "idle partition stays 0": [((10, False, 0.0), 0.0), ((10, False, 5.0), 0.0)],
    "work, watermark moving: 0 every time": [((10, True, 0.0), 0.0), ((11, True, 0.5), 0.0), ((40, True, 1.0), 0.0)],
    "work, watermark held: the time since it was first seen held": [
        ((10, True, 0.0), 0.0),
        ((10, True, 0.5), 0.5),
        ((10, True, 30.0), 30.0),
    ],
    "the held record settles: back to 0, the clock restarts": [
        ((10, True, 0.0), 0.0),
        ((10, True, 20.0), 20.0),
        ((11, True, 20.5), 0.0),
        ((11, True, 21.0), 0.5),
    ],
    "nothing left to do in between: the clock restarts": [
        ((10, True, 0.0), 0.0),
        ((10, True, 3.0), 3.0),
        ((10, False, 3.5), 0.0),
        ((10, True, 4.0), 0.0),
        ((10, True, 5.0), 1.0),
    ],
    "no watermark yet (nothing restored or fetched)": [((None, True, 0.0), 0.0), ((None, True, 9.0), 0.0)],
    "the watermark appears: counted from then": [
        ((None, True, 0.0), 0.0),
        ((7, True, 1.0), 0.0),
        ((7, True, 4.0), 3.0),
    ],
    # A reset to an earlier offset (portal reset) is movement too.
    "the watermark moves back": [((10, True, 0.0), 0.0), ((10, True, 2.0), 2.0), ((3, True, 2.5), 0.0)],
}


@pytest.mark.parametrize("steps", CASES.values(), ids=CASES.keys())
def test_stall(steps: list[tuple[tuple[int | None, bool, float], float]]) -> None:
    stall = Stall()
    for (committed, working, now), expected in steps:
        assert stall.observe(committed, working, now) == pytest.approx(expected), (committed, working, now)
