"""The shared adaptive gate of an endpoint origin, in virtual time: it holds pushes at the limit,
serves waiting partitions in turn (a hot partition cannot take the whole limit), gives a cancelled
waiter's place back, and its limit falls on overload and grows while the endpoint keeps up."""

from __future__ import annotations

import asyncio

import pytest

from ferry.subscription import origin
from ferry.worker.limiter import LimiterSettings
from ferry.worker.origin_gate import Gates, OriginGate
from tests.support.vtime import run


def test_at_the_limit_pushes_wait_and_partitions_take_turns() -> None:
    order: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = OriginGate(LimiterSettings(min_limit=2, max_limit=2, initial_limit=2), clock=loop.time)

        async def push(who: str, i: int) -> None:
            n = await gate.acquire(who)
            order.append(f"{who}{i}")
            assert n <= 2
            await asyncio.sleep(1)
            gate.release(1.0, n, status=200)

        # A hot partition queues 6 pushes before a quiet one queues 2.
        tasks = [loop.create_task(push("hot", i)) for i in range(6)]
        await asyncio.sleep(0)
        tasks += [loop.create_task(push("quiet", i)) for i in range(2)]
        await asyncio.gather(*tasks)

    run(main())
    assert order[:2] == ["hot0", "hot1"]
    # Once waiting, the two partitions alternate instead of the hot one draining first.
    assert order[2:6] == ["hot2", "quiet0", "hot3", "quiet1"]


def _starts_after_four_answers_at_once(baseline_s: float) -> list[float]:
    """A gate of limit 4 whose no-queue latency is ``baseline_s``: four pushes in flight, four
    waiting, then the four answers at the same instant. When each waiting push started (s)."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        gate = OriginGate(LimiterSettings(min_limit=4, max_limit=4, initial_limit=4), clock=loop.time)
        gate.limiter.on_sample(baseline_s, 4, 0.0)
        gate.limiter.on_sample(baseline_s, 4, 0.3)  # a second interval: the baseline is known
        assert gate.limiter.baseline_s == baseline_s
        await asyncio.sleep(1)
        places = [await gate.acquire("p") for _ in range(4)]  # below the limit: at once
        assert places == [1, 2, 3, 4] and loop.time() == 1
        starts: list[float] = []

        async def waiter() -> None:
            await gate.acquire("p")
            starts.append(loop.time())

        waiters = [loop.create_task(waiter()) for _ in range(4)]
        await asyncio.sleep(0)
        for _ in range(4):
            gate.release(baseline_s, 4, status=200)
        await asyncio.gather(*waiters)
        return [round(t - 1, 4) for t in starts]

    return run(main())


def test_answers_that_come_back_together_start_spaced_pushes() -> None:
    """An endpoint serving its slots in step answers them together; the waiting pushes then start
    one per no-queue latency ÷ limit (5 ms here), each up to a tick (1 ms) early, so they do not
    all find the slots taken together."""
    assert _starts_after_four_answers_at_once(0.02) == [0.0, 0.004, 0.009, 0.014]


def test_a_pace_finer_than_the_event_loop_keeps_is_not_paced() -> None:
    # 0.5 ms ÷ 4 = 0.125 ms between starts: below PACE_MIN_S, every waiting push starts at once.
    assert _starts_after_four_answers_at_once(0.0005) == [0.0, 0.0, 0.0, 0.0]


def test_a_cancelled_waiter_leaves_no_hole() -> None:
    async def main() -> int:
        gate = OriginGate(LimiterSettings(min_limit=1, max_limit=1, initial_limit=1))
        await gate.acquire("a")
        waiter = asyncio.get_running_loop().create_task(gate.acquire("b"))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        gate.release(0.01, 1, status=200)
        return gate.in_flight + gate.waiting

    assert run(main()) == 0


def test_the_limit_falls_on_overload_and_grows_while_busy_and_fast() -> None:
    gate = OriginGate(LimiterSettings(min_limit=1, max_limit=64, initial_limit=16))
    t = 0.0
    gate._clock = lambda: t
    gate.in_flight = 1
    gate.release(0.1, 1, status=503)
    assert gate.limit == 11  # 16 × 0.7
    assert gate.allowed == 1  # learning: one push at a time until the no-queue latency is known
    for _ in range(3):
        t += 0.01
        gate.in_flight = 1
        gate.release(0.010, 1, status=200)
    assert gate.allowed == gate.limit == 11
    for _ in range(200):  # steady 10 ms answers with the limit in use
        t += 0.05
        gate.in_flight = 1
        gate.release(0.010, gate.limit, status=200)
    assert gate.limit > 11


def test_the_assignments_worker_counts_reach_each_gate() -> None:
    gates = Gates(wall=lambda: 1000.0)
    early = gates.for_endpoint("http://billing:8000/hook", 1, 32)
    gates.share({"http://billing:8000": 3, "http://mail:80": 2})
    late = gates.for_endpoint("http://mail/x", 1, 32)  # a gate made after the counts came
    other = gates.for_endpoint("http://other:9/x", 1, 32)
    assert (early.limiter.sharing, late.limiter.sharing, other.limiter.sharing) == (3, 2, 1)
    gates.share({})  # alone again
    assert early.limiter.sharing == 1 and gates.stats()["http://billing:8000"]["sharing"] == 1


def test_workers_told_a_new_count_probe_together_and_a_newcomer_starts_from_its_share() -> None:
    wall = [1001.0]
    gates = Gates(wall=lambda: wall[0])
    old = gates.for_endpoint("http://billing:8000/hook", 1, 64)
    gates.share({"http://billing:8000": 4})  # told at 1001.0: the next 5 s mark at least 3 s on
    assert old.limiter._probe_at is not None
    assert old.limiter._probe_at + old.limiter.wall_offset_s == pytest.approx(1005.0)
    wall[0] = 1003.5
    new = gates.for_endpoint("http://mail:80/hook", 1, 64)  # no count for it: alone, the usual start
    assert new.limiter._probe_at is None and new.limiter.limit == 8
    gates.share({"http://billing:8000": 4, "http://mail:80": 2})  # billing unchanged: no new moment
    assert old.limiter._probe_at + old.limiter.wall_offset_s == pytest.approx(1005.0)
    assert new.limiter._probe_at + new.limiter.wall_offset_s == pytest.approx(1010.0)
    joiner = Gates(wall=lambda: 1001.2)
    joiner.share({"http://billing:8000": 4})  # its first assignment, in the same write as old's
    gate = joiner.for_endpoint("http://billing:8000/hook", 1, 64)
    assert gate.limiter._probe_at + gate.limiter.wall_offset_s == pytest.approx(1005.0)
    assert gate.limiter.limit == 2  # 8 shared by 4


def test_gates_are_per_origin_and_the_widest_subscription_bounds_them() -> None:
    gates = Gates()
    a = gates.for_endpoint("http://billing:8000/hook", 1, 32)
    assert gates.for_endpoint("http://billing:8000/other", 1, 64) is a and a.limiter.settings.max_limit == 64
    assert gates.for_endpoint("https://billing/hook", 1, 8) is not a
    assert origin("https://billing/x") == "https://billing:443" and set(gates.stats()) == {
        "http://billing:8000",
        "https://billing:443",
    }


def test_while_the_limiter_probes_one_push_is_in_flight_then_the_limit() -> None:
    """Learning: pushes go one at a time until three have answered (the no-queue latency), then
    up to the limit at once."""
    most: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate = OriginGate(LimiterSettings(min_limit=1, max_limit=8, initial_limit=4), clock=loop.time)

        async def push(i: int) -> None:
            n = await gate.acquire("p")
            most.append(gate.in_flight)
            await asyncio.sleep(0.02)
            gate.release(0.02, n, status=200)

        await asyncio.gather(*(push(i) for i in range(11)))
        assert not gate.limiter.probing and gate.limiter.baseline_s == 0.02

    run(main())
    assert most[:3] == [1, 1, 1] and max(most[3:]) == 4


def test_only_a_2xx_answer_is_a_latency_sample() -> None:
    """A 500 in a millisecond or a 404 says nothing of how long the endpoint takes to serve: taken
    as a sample, it would become the no-queue latency and every real answer would read as a queue."""
    gate = OriginGate(LimiterSettings(min_limit=1, max_limit=64, initial_limit=16, probe_every_s=30.0))
    t = 0.0
    gate._clock = gate._wall = lambda: t
    for status in (500, 404, 500):
        t += 0.01
        gate.in_flight = 1
        gate.release(0.001, 1, status=status)
    # three answers end the learning probe, but none was a sample: no no-queue latency, and the
    # endpoint is not held at one push in flight
    assert gate.limiter.baseline_s is None and not gate.limiter.probing and gate.allowed == 16
    assert gate.overloads == 0 and gate.in_flight == 0
    for status in (None, 429, 503):  # no answer and the overload answers cut the limit
        t += 0.3
        gate.in_flight = 1
        gate.release(0.5, 1, status=status)
    assert gate.overloads == 3 and gate.limit == 5  # 16 × 0.7³
    t = 30.0  # the next mark: 2xx answers start a probe and end it
    for _ in range(4):
        t += 0.02
        gate.in_flight = 1
        gate.release(0.02, 1, status=204)
    assert gate.limiter.baseline_s == 0.02 and not gate.limiter.probing
    gate.in_flight = 1
    gate.abandon()
    assert gate.in_flight == 0
