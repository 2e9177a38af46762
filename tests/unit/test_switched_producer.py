"""SwitchedProducer: which producer each write goes through, and that only one has writes in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ferry.served_producer import Acked
from ferry.switched_producer import SwitchedProducer


class FakeServed:
    """A ServedProducer's surface: acknowledgement() futures, and a producer that records writes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.producer: Any = self
        self.delivered: dict[int, Any] = {}  # id(future) -> what runs once librdkafka reports it

    def acknowledgement(
        self, timeout_s: float | None = None, delivered: Any = None
    ) -> tuple[asyncio.Future[Acked], Any]:
        fut: asyncio.Future[Acked] = asyncio.get_running_loop().create_future()
        self.delivered[id(fut)] = delivered
        return fut, None


class Log:
    """Writes numbered in the order made; where each went, in the order they were sent."""

    def __init__(self, busy_at: int = 4, idle_at: int = 1, dwell_s: float = 0.0) -> None:
        self.quick, self.lingering = FakeServed("quick"), FakeServed("lingering")
        self.now = 0.0
        self.switched = SwitchedProducer(
            self.quick,  # type: ignore[arg-type]
            self.lingering,  # type: ignore[arg-type]
            busy_at,
            idle_at,
            dwell_s=dwell_s,
            clock=lambda: self.now,
        )
        self.sent: list[tuple[int, str]] = []
        self.futures: dict[int, asyncio.Future[Acked]] = {}
        self.reported: set[int] = set()
        self.n = 0

    def write(self, fail: bool = False) -> int:
        i = self.n
        self.n += 1

        def produce(producer: Any, _: Any) -> None:
            if fail:
                raise BufferError("queue full")
            self.sent.append((i, producer.name))

        self.futures[i] = self.switched.send(produce, 10.0)
        return i

    async def ack(self, *ids: int) -> None:
        """librdkafka reports these writes (the poll thread's callbacks, on the loop)."""
        for i in ids:
            self.reported.add(i)
            fut = self.futures[i]
            if not fut.done():
                fut.set_result((None, 0, i))
            for served in (self.quick, self.lingering):
                delivered = served.delivered.pop(id(fut), None)
                if delivered is not None:
                    delivered()
        await asyncio.sleep(0)


def test_idle_writes_go_out_at_once_through_the_quick_producer() -> None:
    async def run() -> None:
        log = Log()
        for _ in range(3):
            await log.ack(log.write())
        assert log.sent == [(0, "quick"), (1, "quick"), (2, "quick")]

    asyncio.run(run())


def test_busy_writes_are_held_until_the_quick_ones_are_acknowledged() -> None:
    async def run() -> None:
        log = Log(busy_at=4, idle_at=1)
        for _ in range(4):
            log.write()  # 0-3 in flight on quick
        held = [log.write(), log.write()]  # 4 outstanding: the switch starts, these wait
        assert log.sent == [(0, "quick"), (1, "quick"), (2, "quick"), (3, "quick")]
        assert log.switched.next is log.lingering and log.switched.outstanding == 6
        await log.ack(0, 1, 2)
        assert len(log.sent) == 4  # one quick write still in flight: still held
        await log.ack(3)
        assert log.sent[4:] == [(held[0], "lingering"), (held[1], "lingering")]
        assert log.switched.active is log.lingering and log.switched.next is None

    asyncio.run(run())


def test_it_switches_back_once_few_are_outstanding() -> None:
    async def run() -> None:
        log = Log(busy_at=3, idle_at=1)
        for _ in range(6):
            log.write()  # 0-2 on quick; the switch starts at 3, so 3-5 are held
        await log.ack(0, 1, 2)
        assert log.sent[3:] == [(3, "lingering"), (4, "lingering"), (5, "lingering")]
        log.write()  # 3 outstanding before it: above idle_at, stays lingering
        assert log.sent[-1] == (6, "lingering")
        await log.ack(3, 4, 5)
        log.write()  # 1 outstanding before it (6): at idle_at, back to quick; 7 waits for 6
        assert log.switched.next is log.quick and log.sent[-1] == (6, "lingering")
        await log.ack(6)
        assert log.sent[-1] == (7, "quick") and log.switched.active is log.quick

    asyncio.run(run())


def test_a_switch_starts_at_most_once_per_dwell() -> None:
    async def run() -> None:
        log = Log(busy_at=3, idle_at=1, dwell_s=1.0)
        log.now = 10.0
        for _ in range(4):
            log.write()  # the switch to lingering starts at write 3
        await log.ack(0, 1, 2)
        await log.ack(3)
        log.now = 10.5
        log.write()  # nothing outstanding: quick is wanted, but the last switch was 0.5 s ago
        assert log.sent[-1] == (4, "lingering") and log.switched.switches == 1
        await log.ack(4)
        log.now = 11.0
        log.write()  # a second later: back to quick (nothing in flight, so at once)
        assert log.sent[-1] == (5, "quick") and log.switched.switches == 2

    asyncio.run(run())


@pytest.mark.parametrize(
    ("writes", "acks_between"),
    [
        (40, 1),  # acknowledged about as fast as written
        (40, 5),
        (60, 13),  # acknowledgements lag: repeated switching
    ],
)
def test_writes_are_sent_in_the_order_made_and_never_on_two_producers_at_once(writes: int, acks_between: int) -> None:
    async def run() -> None:
        log = Log(busy_at=6, idle_at=2)
        acked = 0
        for w in range(writes):
            log.write()
            if w % acks_between == 0:
                # acknowledge the oldest sent write, as a broker would
                unacked = [i for i, _ in log.sent if i not in log.reported]
                if unacked:
                    await log.ack(unacked[0])
                    acked += 1
            in_flight = {name for i, name in log.sent if i not in log.reported}
            assert len(in_flight) <= 1, in_flight
        while len(log.sent) < writes or len(log.reported) < writes:
            unacked = [i for i, _ in log.sent if i not in log.reported]
            await log.ack(unacked[0])
        assert [i for i, _ in log.sent] == list(range(writes))

    asyncio.run(run())


def test_a_held_write_that_cannot_be_sent_fails_its_future_and_the_rest_go() -> None:
    async def run() -> None:
        log = Log(busy_at=2, idle_at=0)
        log.write()
        log.write()
        bad = log.write(fail=True)  # held
        good = log.write()  # held
        await log.ack(0, 1)
        with pytest.raises(BufferError):
            log.futures[bad].result()
        assert log.sent[-1] == (good, "lingering")

    asyncio.run(run())


def test_a_held_write_given_up_on_is_not_sent() -> None:
    async def run() -> None:
        log = Log(busy_at=2, idle_at=0)
        log.write()
        log.write()
        gone = log.write()
        log.futures[gone].set_exception(TimeoutError())  # its deadline passed while held
        await log.ack(0, 1)
        assert [i for i, _ in log.sent] == [0, 1]
        assert isinstance(log.futures[gone].exception(), TimeoutError)

    asyncio.run(run())


def test_a_sent_write_given_up_on_stays_in_flight_until_reported() -> None:
    async def run() -> None:
        log = Log(busy_at=2, idle_at=0)
        log.write()
        log.write()
        held = log.write()  # the switch waits for 0 and 1
        log.futures[0].set_exception(TimeoutError())  # its writer gave up; librdkafka still has it
        await log.ack(1)
        assert [i for i, _ in log.sent] == [0, 1]  # 0 not reported yet: still held
        await log.ack(0)
        assert log.sent[-1] == (held, "lingering")
        assert isinstance(log.futures[0].exception(), TimeoutError)

    asyncio.run(run())


def test_a_write_sent_at_once_raises_and_is_not_counted() -> None:
    async def run() -> None:
        log = Log()
        with pytest.raises(BufferError):
            log.write(fail=True)
        assert log.switched.outstanding == 0

    asyncio.run(run())


def test_without_a_lingering_producer_everything_goes_through_the_quick_one() -> None:
    async def run() -> None:
        quick = FakeServed("quick")
        switched = SwitchedProducer(quick, None, 2, 0)  # type: ignore[arg-type]
        sent: list[str] = []
        for _ in range(5):
            switched.send(lambda p, _: sent.append(p.name), 1.0)
        assert sent == ["quick"] * 5 and switched.next is None

    asyncio.run(run())


def test_thresholds_are_checked() -> None:
    with pytest.raises(ValueError, match="idle_at"):
        SwitchedProducer(FakeServed("q"), None, 4, 4)  # type: ignore[arg-type]
