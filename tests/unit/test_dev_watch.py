"""What ferry dev prints about a subscription, from two status snapshots (pure)."""

from __future__ import annotations

import pytest

from ferry.devstack.watch import summary, totals


def st(retried: int, dead: int, held: float) -> dict[str, float]:
    return totals({"partitions": [{"retried": retried, "dead_lettered": dead, "stalled_s": held}, {"retried": 0}]})


@pytest.mark.parametrize(
    ("before", "now", "line"),
    [
        (None, st(5, 0, 0), None),  # first look: nothing to compare
        (st(5, 1, 0), st(5, 1, 0), None),  # quiet
        (st(5, 1, 0), st(45, 3, 0), "demo: failing — 40 retries, 2 dead letters in the last 5 s"),
        (st(5, 1, 0), st(5, 1, 12.0), "demo: failing — no progress; a record has held its partition for 12 s"),
        (
            st(0, 0, 0),
            st(3, 0, 11.0),
            "demo: failing — 3 retries in the last 5 s; a record has held its partition for 11 s",
        ),
    ],
)
def test_summary(before: dict[str, float] | None, now: dict[str, float], line: str | None) -> None:
    assert summary("demo", before, now, 5.0) == line
