"""Adaptive concurrency (worker.limiter): the limit's path on latency sequences, as tables.

A simulated endpoint serves ``capacity`` pushes at once in ``service_s`` each and queues the rest
(so latency = service time × ceil(in flight / capacity)); the sender keeps what the limiter allows
in flight. Every push of a wave waits as long as the others, so no push ever sees an empty queue
unless the limiter drains it: the model where a no-queue latency learnt from latencies under load
would drift."""

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
            in_flight = lim.allowed
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


def test_learning_probes_one_push_at_a_time_then_starts_at_the_initial_limit() -> None:
    lim = AdaptiveLimit(LimiterSettings(initial_limit=8))
    assert lim.baseline_s is None and lim.probing and lim.allowed == 1 and lim.limit == 8
    lim.on_sample(0.09, 8, 0.0)  # sent before the probe, behind the worker's own queue: ignored
    lim.on_sample(0.05, 1, 0.01)
    lim.on_sample(0.04, 1, 0.02)
    assert lim.probing and lim.baseline_s is None
    lim.on_sample(0.06, 1, 0.03)  # the third push at the minimum ends it
    assert not lim.probing and lim.baseline_s == 0.04 and lim.allowed == 8


def test_a_slow_probe_ends_after_one_answer_and_an_interval() -> None:
    lim = AdaptiveLimit(LimiterSettings(interval_s=0.25))
    lim.on_sample(2.0, 8, 0.0)  # the probe starts at the first answer
    lim.on_sample(1.0, 1, 1.0)
    assert not lim.probing and lim.baseline_s == 1.0


Answer = float | None | tuple[float | None, int]  # a latency (None: an error), with its in-flight count


@pytest.mark.parametrize(
    ("name", "answers", "probing", "baseline"),
    [
        ("three errors end the probe", [None, None, None], False, None),
        ("two errors do not, within an interval", [None, None], True, None),
        ("a 2xx among errors is the no-queue latency", [None, 0.03, None], False, 0.03),
        ("errors of pushes sent before the probe do not count", [(None, 8), (None, 8), (None, 8)], True, None),
    ],
)
def test_errors_answer_a_probe(name: str, answers: list[Answer], probing: bool, baseline: float | None) -> None:
    lim = AdaptiveLimit(LimiterSettings(initial_limit=8, interval_s=0.25))
    for i, answer in enumerate(answers):
        latency, in_flight = answer if isinstance(answer, tuple) else (answer, 1)
        if latency is None:
            lim.on_error(in_flight, i * 0.01)
        else:
            lim.on_sample(latency, in_flight, i * 0.01)
    assert (lim.probing, lim.baseline_s) == (probing, baseline), name
    assert lim.allowed == (1 if probing else 8), name


def test_an_endpoint_answering_only_errors_is_not_held_at_the_minimum() -> None:
    """Learning failed: the limit stays where it started; a later probe's 2xx answers teach it."""
    lim = AdaptiveLimit(LimiterSettings(initial_limit=8, probe_every_s=30.0, interval_s=0.25))
    lim.on_error(1, 0.0)
    lim.on_error(1, 0.3)  # one answer after an interval ends a probe
    assert not lim.probing and lim.allowed == 8 and lim.baseline_s is None
    for t in range(1, 29):  # 2xx answers at the limit, no no-queue latency: no adjustment
        lim.on_sample(0.5, 8, float(t))
    assert lim.limit == 8 and lim.baseline_s is None
    lim.on_sample(0.5, 8, 30.1)  # the mark: a probe
    assert lim.probing
    for t in (30.2, 30.3, 30.4):
        lim.on_sample(0.02, 1, t)
    assert not lim.probing and lim.baseline_s == 0.02


def test_a_failed_probe_keeps_the_no_queue_latency_it_had() -> None:
    lim = AdaptiveLimit(LimiterSettings(probe_every_s=30.0, max_limit=256))
    drive(lim, [(31, 16, 0.01)])  # learnt, then probed again at 30 s
    baseline, limit = lim.baseline_s, lim.limit
    lim.on_sample(0.01, 1, 60.5)  # the next mark
    assert lim.probing
    for t in (60.6, 60.7, 60.8):
        lim.on_error(1, t)
    assert not lim.probing and lim.baseline_s == baseline and lim.limit == limit


def test_the_no_queue_latency_is_probed_again_and_the_limit_kept() -> None:
    lim = AdaptiveLimit(LimiterSettings(probe_every_s=30.0, max_limit=256))
    trace = drive(lim, [(29, 16, 0.01)])
    learned = lim.limit
    assert not lim.probing and trace[-1][1] == learned
    drive(lim, [(2, 16, 0.01)])  # past 30 s: a probe, three pushes at the minimum, then the limit
    assert not lim.probing and lim.allowed == lim.limit and abs(lim.limit - learned) <= 3


def test_fixed_bounds_are_not_probed() -> None:
    lim = AdaptiveLimit(LimiterSettings(min_limit=4, max_limit=4, initial_limit=4, probe_every_s=1.0))
    drive(lim, [(10, 2, 0.01)])
    assert lim.allowed == 4 and not lim.probing


@pytest.mark.parametrize("capacity", [1, 2, 4])
def test_a_start_above_capacity_still_finds_the_no_queue_latency(capacity: int) -> None:
    """Starting at 8 against fewer slots, every push of the first waves is queued; were the
    no-queue latency their minimum, the limit would grow with the queue it causes (to 74 for
    capacity 4 after 3 minutes, latency 14× the service time)."""
    lim = AdaptiveLimit(LimiterSettings(max_limit=256))
    trace = drive(lim, [(180, capacity, 0.02)])
    assert lim.baseline_s == pytest.approx(0.02)
    lo, hi = settled(trace, 60.0)
    assert hi <= capacity + 1, (lo, hi)


def test_an_idle_sender_does_not_raise_the_limit_it_never_uses() -> None:
    lim = AdaptiveLimit(LimiterSettings(initial_limit=8, max_limit=256))
    for i in range(400):
        lim.on_sample(0.01, 1, i * 0.05)  # one push at a time, fast answers
    assert lim.limit == 8


def test_baseline_rises_when_the_endpoint_becomes_slower_for_good() -> None:
    lim = AdaptiveLimit(LimiterSettings(probe_every_s=5.0, max_limit=256))
    drive(lim, [(6, 16, 0.01)])
    assert lim.baseline_s == pytest.approx(0.01, rel=0.01)
    drive(lim, [(20, 16, 0.05)])  # the next probe measures the slower latency
    assert lim.baseline_s == pytest.approx(0.05, rel=0.01)
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


def drive_shared(lims: list[AdaptiveLimit], starts: list[float], seconds: float, capacity: int, service: float) -> int:
    """Several workers' limiters pushing to one endpoint (the model of ``drive``), worker i from
    ``starts[i]``; returns the most the workers together allowed in flight over the last 30 s."""
    now, most = 0.0, 0
    while now < seconds:
        active = [lim for lim, start in zip(lims, starts, strict=True) if now >= start]
        latency = service * math.ceil(sum(lim.allowed for lim in active) / capacity)
        for lim in active:
            allowed = lim.allowed
            for _ in range(allowed):
                lim.on_sample(latency, allowed, now)
        now += latency
        if now > seconds - 30:
            most = max(most, sum(lim.limit for lim in lims))
    return most


@pytest.mark.parametrize("capacity", [4, 16])
def test_workers_started_apart_probe_together_and_share_the_capacity(capacity: int) -> None:
    """A worker that joins while the others keep a queue measures their queue in its first probe;
    the next probes fall on the same wall-clock marks for all, the endpoint drains, and the limits
    add up to about its capacity (probing each on its own, three workers reached 135 for
    capacity 4 in this model)."""
    lims = [AdaptiveLimit(LimiterSettings(max_limit=256)) for _ in range(3)]
    most = drive_shared(lims, [0.0, 7.3, 14.6], 240.0, capacity, 0.02)
    assert most <= capacity + 3, most
    assert all(lim.baseline_s == pytest.approx(0.02) for lim in lims)


@pytest.mark.parametrize(("workers", "capacity"), [(2, 4), (3, 4), (4, 4)])
def test_workers_that_know_they_share_grow_as_one(workers: int, capacity: int) -> None:
    """Each worker keeping a queue of its own growth queues ``workers`` times as much at the
    endpoint as one does; told how many share it, they grow as one limiter would."""

    def run(sharing: int) -> int:
        lims = [AdaptiveLimit(LimiterSettings(max_limit=256), sharing=sharing) for _ in range(workers)]
        return drive_shared(lims, [7.3 * i for i in range(workers)], 240.0, capacity, 0.02)

    alone, shared = run(1), run(workers)
    assert shared <= capacity + 2 and shared < alone, (shared, alone)


def test_a_new_count_of_workers_is_probed_at_the_moment_told_with_it() -> None:
    lim = AdaptiveLimit(LimiterSettings(probe_every_s=30.0, max_limit=256))
    drive(lim, [(10, 16, 0.01)])
    learned = lim.limit
    lim.share(2, probe_at_wall=12.0, now=10.0)  # wall_offset_s 0: the caller's time is the wall's
    lim.on_sample(0.01, learned, 11.9)
    assert not lim.probing and lim.sharing == 2
    lim.on_sample(0.01, learned, 12.0)  # the moment: a probe, with every worker told the count
    assert lim.probing and lim.allowed == 1


def test_a_worker_joining_others_learns_from_the_moment_told_on() -> None:
    """Its pushes before that moment may meet the others' queue: they do not teach it."""
    lim = AdaptiveLimit(LimiterSettings(interval_s=0.25))
    lim.share(4, probe_at_wall=5.0, now=1.0)
    for t in (1.1, 2.0, 3.0, 4.0, 5.03):  # the last was sent at 4.98, before the moment
        lim.on_sample(0.05, 1, t)
    assert lim.probing and lim.baseline_s is None and lim.allowed == 1
    for t in (5.1, 5.2, 5.3):
        lim.on_sample(0.02, 1, t)
    assert not lim.probing and lim.baseline_s == 0.02


def test_a_joining_worker_learning_from_errors_alone_still_ends_its_probe() -> None:
    lim = AdaptiveLimit(LimiterSettings(interval_s=0.25))
    lim.share(2, probe_at_wall=5.0, now=1.0)
    lim.on_error(1, 4.0)  # before the moment: not an answer of the probe
    assert lim.probing
    for t in (5.1, 5.2, 5.3):
        lim.on_error(1, t)
    assert not lim.probing and lim.baseline_s is None


def test_a_moment_already_past_or_fixed_bounds_change_nothing() -> None:
    lim = AdaptiveLimit(LimiterSettings(min_limit=4, max_limit=4, initial_limit=4))
    drive(lim, [(1, 2, 0.01)])
    lim.share(3, probe_at_wall=5.0, now=1.0)
    lim.on_sample(0.01, 4, 6.0)
    assert not lim.probing and lim.sharing == 3 and lim.allowed == 4
    late = AdaptiveLimit(LimiterSettings())
    drive(late, [(3, 16, 0.01)])
    late.share(2, probe_at_wall=2.0, now=3.0)
    late.on_sample(0.01, 8, 3.1)
    assert not late.probing


def test_probes_start_on_the_wall_clocks_marks() -> None:
    lim = AdaptiveLimit(LimiterSettings(probe_every_s=30.0))
    lim.wall_offset_s = 1020.0 + 7.0  # the caller's time 0 is 7 s past a mark (1020 s)
    for i in range(3):
        lim.on_sample(0.01, 1, 0.01 * i)  # the learning probe
    assert not lim.probing
    lim.on_sample(0.01, 8, 22.9)
    assert not lim.probing
    lim.on_sample(0.01, 8, 23.05)  # 30 s on the wall clock
    assert lim.probing and lim.allowed == 1
