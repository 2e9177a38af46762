"""Adaptive concurrency (worker.limiter): the limit's path on latency sequences, as tables.

A simulated endpoint serves ``capacity`` pushes at once in ``service_s`` each and queues the rest
(so latency = service time × ceil(in flight / capacity)); the sender keeps the limit in flight."""

from __future__ import annotations

import math
import random

import pytest

from ferry.worker.limiter import AdaptiveLimit, LimiterSettings, growth


def drive(
    lim: AdaptiveLimit, phases: list[tuple[float, int, float]], noise: float = 0.0, seed: int = 1
) -> list[tuple[float, int]]:
    """Run the closed loop through phases of (seconds, capacity, service seconds); returns
    (time, limit) after each interval."""
    rng = random.Random(seed)
    now, trace = 0.0, []
    for seconds, capacity, service in phases:
        end = now + seconds
        while now < end:
            in_flight = lim.limit
            latency = service * math.ceil(in_flight / capacity)
            if noise:
                latency *= 1 + rng.uniform(-noise, noise)
            for _ in range(in_flight):
                lim.on_sample(latency, in_flight, now)
            now += latency
            trace.append((now, lim.limit))
    return trace


def settled(trace: list[tuple[float, int]], after: float, until: float = math.inf) -> tuple[int, int]:
    tail = [limit for t, limit in trace if after <= t < until]
    return min(tail), max(tail)


@pytest.mark.parametrize(
    ("name", "phases", "noise", "window"),
    [
        ("steady capacity 16: settles near 16-24", [(20, 16, 0.01)], 0.0, (14, 26)),
        ("noisy latency (±20 %): still near capacity", [(20, 16, 0.01)], 0.2, (12, 28)),
        ("step up 8 → 32: follows within 5 s", [(10, 8, 0.01), (10, 32, 0.01)], 0.0, (28, 50)),
    ],
)
def test_limit_follows_capacity(
    name: str, phases: list[tuple[float, int, float]], noise: float, window: tuple[int, int]
) -> None:
    lim = AdaptiveLimit(LimiterSettings(max_limit=256))
    trace = drive(lim, phases, noise)
    total = sum(p[0] for p in phases)
    lo, hi = settled(trace, total - 5.0)
    assert window[0] <= lo and hi <= window[1], (name, lo, hi)


def test_step_down_cuts_the_limit_within_seconds() -> None:
    lim = AdaptiveLimit(LimiterSettings(max_limit=256))
    trace = drive(lim, [(10, 32, 0.01), (10, 4, 0.01)])
    before = settled(trace, 5.0, 10.0)
    after = settled(trace, 15.0)
    assert before[0] >= 28
    assert after[1] <= 8, after  # near the new capacity of 4, not the old 32


def test_overload_cuts_multiplicatively_once_per_interval() -> None:
    lim = AdaptiveLimit(LimiterSettings(initial_limit=100, max_limit=100, interval_s=0.25))
    lim.on_overload(10.0)
    assert lim.limit == 70
    for i in range(50):  # a burst of 503s within one interval is one signal
        lim.on_overload(10.0 + i * 0.001)
    assert lim.limit == 70
    lim.on_overload(10.3)
    assert lim.limit == 49
    for i in range(100):
        lim.on_overload(11 + i)
    assert lim.limit == 1  # never below min


def test_learning_keeps_the_initial_limit_until_a_baseline_exists() -> None:
    lim = AdaptiveLimit(LimiterSettings(initial_limit=8))
    assert lim.baseline_s is None
    lim.on_sample(0.05, 8, 0.0)
    assert lim.limit == 8 and lim.baseline_s is None


def test_an_idle_sender_does_not_raise_the_limit_it_never_uses() -> None:
    lim = AdaptiveLimit(LimiterSettings(initial_limit=8, max_limit=256))
    for i in range(400):
        lim.on_sample(0.01, 1, i * 0.05)  # one push at a time, fast answers
    assert lim.limit == 8


def test_baseline_rises_when_the_endpoint_becomes_slower_for_good() -> None:
    lim = AdaptiveLimit(LimiterSettings(baseline_window_s=5.0, max_limit=256))
    drive(lim, [(6, 16, 0.01)])
    assert lim.baseline_s == pytest.approx(0.01, rel=0.01)
    drive(lim, [(20, 16, 0.05)])
    assert lim.baseline_s is not None and lim.baseline_s >= 0.04
    assert lim.limit >= 12  # it did not collapse: the slower latency became the new normal


def test_bad_settings_say_what_to_change() -> None:
    with pytest.raises(ValueError, match="1 <= min"):
        AdaptiveLimit(LimiterSettings(min_limit=10, max_limit=5))


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (1, 1.0),  # at least one: a collapsed limit still climbs back
        (4, 1.0),  # a quarter of a small limit, not √4 = 2: half the capacity queued
        (8, 2.0),
        (16, 4.0),  # where √limit and a quarter meet
        (64, 8.0),  # √limit beyond
        (256, 16.0),
    ],
)
def test_growth_is_root_limit_at_most_a_quarter_of_it(limit: float, expected: float) -> None:
    assert growth(limit) == expected
