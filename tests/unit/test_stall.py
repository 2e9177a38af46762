"""Watermark stall (worker.stall): seconds the head of a partition has held its progress."""

from __future__ import annotations

import pytest

from ferry.worker.stall import Stall

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


# Reporting at a 60 s threshold: (committed, working, now) → what report() says after it.
REPORTS = {
    "a short stall is never reported": [((10, True, 0.0), None), ((10, True, 30.0), None), ((11, True, 31.0), None)],
    "once when it passes the threshold, once when it ends": [
        ((10, True, 0.0), None),
        ((10, True, 59.5), None),
        ((10, True, 60.0), "began"),
        ((10, True, 90.0), None),
        ((11, True, 90.5), "ended"),
        ((11, True, 91.0), None),
    ],
    "ends when the work is gone too (the record was the last one)": [
        ((10, True, 0.0), None),
        ((10, True, 61.0), "began"),
        ((11, False, 62.0), "ended"),
    ],
    "a second stall is reported again": [
        ((10, True, 0.0), None),
        ((10, True, 60.0), "began"),
        ((11, True, 61.0), "ended"),
        ((11, True, 125.0), "began"),
    ],
}


@pytest.mark.parametrize("steps", REPORTS.values(), ids=REPORTS.keys())
def test_report(steps: list[tuple[tuple[int | None, bool, float], str | None]]) -> None:
    stall = Stall()
    for (committed, working, now), expected in steps:
        stall.observe(committed, working, now)
        assert stall.report(60.0) == expected, (committed, working, now)


def test_longest_is_the_stall_that_ended() -> None:
    stall = Stall()
    for committed, now in ((10, 0.0), (10, 75.0), (11, 75.5)):
        stall.observe(committed, True, now)
    assert (stall.held_s, stall.longest_s) == (0.0, 75.0)
