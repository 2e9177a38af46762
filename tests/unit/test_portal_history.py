"""The portal's history and health badge, as tables of worker reports over (fake) time: samples
chained as the store chains them (tests/integration/test_portal_history_store.py keeps them in a
real database)."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.portal.history import HISTORY_S, LAG_RECORDS, Point, Sample, health, step, summary
from ferry.subscription import INTERNAL_PREFIX, PartitionRef

A0 = PartitionRef("orders", "t", 0)
A1 = PartitionRef("orders", "t", 1)


class Chain:
    """Each sample measured against the one before, as the store does."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def observe(self, now_ms: int, stats: dict[PartitionRef, dict[str, Any]]) -> None:
        previous = self.samples[-1].baseline() if self.samples else None
        self.samples.append(step(previous, now_ms, stats))

    def points(self, subscription: str) -> list[Point]:
        return [s.totals[subscription] for s in self.samples if subscription in s.totals]

    def partitions(self, subscription: str) -> dict[PartitionRef, list[Point]]:
        out: dict[PartitionRef, list[Point]] = {}
        for sample in self.samples:
            for ref, (point, _) in sample.partitions.items():
                if ref.subscription == subscription:
                    out.setdefault(ref, []).append(point)
        return out


def report(worker: str = "w1", epoch: int = 1, **figures: Any) -> dict[str, Any]:
    return {"worker": worker, "epoch": epoch, "delivered": 0, "retried": 0, "dead_lettered": 0, "lag": 0, **figures}


def test_the_first_sample_is_a_baseline_then_rates_are_growth_per_second() -> None:
    h = Chain()
    h.observe(0, {A0: report(delivered=5_000), A1: report(delivered=100)})
    h.observe(10_000, {A0: report(delivered=5_200, lag=7), A1: report(delivered=150, lag=3)})
    first, second = h.points("orders")
    assert (first.delivered_per_s, first.lag) == (0, 0)
    assert (second.delivered_per_s, second.lag) == (25.0, 10)
    assert [p.delivered_per_s for p in h.partitions("orders")[A0]] == [0, 20.0]


def test_a_partition_taken_over_between_samples_counts_everything_its_owner_did() -> None:
    h = Chain()
    h.observe(0, {A0: report(delivered=5_000)})
    h.observe(10_000, {A0: report(delivered=5_000), A1: report(retried=40, dead_lettered=20)})
    assert [p.dead_lettered for p in h.partitions("orders")[A1]] == [20]
    assert h.points("orders")[-1].retried_per_s == 4.0


@pytest.mark.parametrize(
    ("before", "after", "delivered_per_s"),
    [
        (report(delivered=100), report(delivered=160), 6.0),  # the same owner: growth
        (report(delivered=100), report(worker="w2", epoch=2, delivered=30), 3.0),  # a new owner counts from 0
        (report(delivered=100), report(epoch=2, delivered=40), 4.0),  # the same worker, a new epoch
        (report(delivered=100), report(delivered=20), 2.0),  # a counter went back: it restarted
    ],
)
def test_rates_across_owners(before: dict[str, Any], after: dict[str, Any], delivered_per_s: float) -> None:
    h = Chain()
    h.observe(0, {A0: before})
    h.observe(10_000, {A0: after})
    assert h.points("orders")[-1].delivered_per_s == delivered_per_s


def test_ferrys_own_work_has_no_history() -> None:
    h = Chain()
    h.observe(0, {PartitionRef(INTERNAL_PREFIX + "delay", "__ferry_delay", 0): report(), A0: report()})
    assert h.points(INTERNAL_PREFIX + "delay") == [] and len(h.points("orders")) == 1


def test_a_baseline_older_than_the_history_is_no_baseline() -> None:
    h = Chain()
    h.observe(0, {A0: report(delivered=100)})
    h.observe(int(HISTORY_S * 1000) + 1, {A0: report(delivered=5_000)})
    assert h.points("orders")[-1].delivered == 0 and h.points("orders")[-1].delivered_per_s == 0


def _run(samples: list[dict[str, Any]], state: str = "active") -> str:
    """One sample per 10 s of A0's report; the health at the last one."""
    h = Chain()
    for i, figures in enumerate(samples):
        h.observe(i * 10_000, {A0: report(**figures)})
    return health(state, h.points("orders"), (len(samples) - 1) * 10_000)


FLOWING = [{"delivered": 100 * i, "lag": 5} for i in range(10)]


@pytest.mark.parametrize(
    ("name", "samples", "state", "expected"),
    [
        ("delivering, small lag", FLOWING, "active", "ok"),
        ("paused wins", [{"dead_lettered": i} for i in range(10)], "paused", "paused"),
        ("nothing reported", [], "active", "unknown"),
        (
            "dead letters in the last minute",
            [*FLOWING, {"delivered": 1000, "dead_lettered": 1, "lag": 5}],
            "active",
            "failing",
        ),
        (
            "dead letters long ago only",
            [{"dead_lettered": 1}] + [{"dead_lettered": 1, "delivered": 100 * i} for i in range(1, 10)],
            "active",
            "ok",
        ),
        ("retries outnumber deliveries", [{"retried": 10 * i, "delivered": i} for i in range(10)], "active", "failing"),
        (
            "a few retries among many deliveries",
            [{"retried": i, "delivered": 100 * i} for i in range(10)],
            "active",
            "ok",
        ),
        ("watermark held 60 s", [*FLOWING, {"delivered": 900, "stalled_s": 61.0}], "active", "stalled"),
        ("held 30 s", [*FLOWING, {"delivered": 900, "stalled_s": 30.0}], "active", "ok"),
        (
            "behind and falling further",
            [{"delivered": 100 * i, "lag": LAG_RECORDS + 100 * i} for i in range(10)],
            "active",
            "lagging",
        ),
        (
            "behind but catching up",
            [{"delivered": 100 * i, "lag": 10 * LAG_RECORDS - 100 * i} for i in range(10)],
            "active",
            "ok",
        ),
        ("growing but small", [{"delivered": 100 * i, "lag": 10 * i} for i in range(10)], "active", "ok"),
    ],
)
def test_health(name: str, samples: list[dict[str, Any]], state: str, expected: str) -> None:
    assert _run(samples, state) == expected, name


def test_the_summary_shows_the_figures_the_badge_was_judged_on() -> None:
    h = Chain()
    for i in range(7):
        h.observe(i * 10_000, {A0: report(delivered=100 * i, dead_lettered=i, lag=42, stalled_s=3.0)})
    s = summary("orders", "active", h.points("orders"), 6, 10, 60_000)
    assert s == {
        "name": "orders",
        "state": "active",
        "health": "failing",
        "lag": 42,
        "delivered_per_s": 10.0,
        "retried_per_s": 0.0,
        "dead_lettered_per_s": 0.1,
        "dead_lettered_1h": 6,
        "dead_lettered_1m": 6,
        "stalled_s": 3.0,
    }
    stale = summary("orders", "active", h.points("orders"), 6, 10, 60_000 + 31_000)
    assert stale["lag"] is None  # no fresh sample: unknown figures
