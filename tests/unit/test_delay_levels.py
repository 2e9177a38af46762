"""Delay levels (ferry.delay): where a scheduled record waits next, and the rewrites it costs."""

from __future__ import annotations

import random

import pytest

from ferry import delay
from ferry.delay import InvalidSchedule, Level

DAY = 86_400_000


@pytest.mark.parametrize(
    ("remaining", "level"),
    [
        (0, None),
        (999, None),
        (1000, Level(3, 1)),
        (1999, Level(3, 1)),
        (9_999, Level(3, 9)),
        (119_000, Level(5, 1)),
        (3 * 3_600_000, Level(7, 1)),  # 3 h = 10.8e6 ms: the 10^7 ms decade
        (90 * DAY, Level(9, 7)),
        (9 * 10**9, Level(9, 9)),
        (10**11, Level(9, 9)),  # beyond the top: the top level again
    ],
)
def test_level_for_is_the_longest_level_that_fits(remaining: int, level: Level | None) -> None:
    assert delay.level_for(remaining) == level
    if level is not None:
        assert level.delay_ms <= remaining
        longer = [lv for lv in delay.LEVELS if lv.delay_ms > level.delay_ms]
        assert not longer or min(lv.delay_ms for lv in longer) > remaining or remaining > delay.LONGEST_LEVEL_MS


@pytest.mark.parametrize(
    ("due", "now", "step"),
    [
        (1000, 1000, ("deliver", None)),
        (1000, 5000, ("deliver", None)),  # late (or a deliver_at in the past): now
        (1001, 1000, ("hold", 1)),
        (1999, 1000, ("hold", 999)),  # due within a second: in memory
        (2000, 1000, ("wait", Level(3, 1))),
        (121_000, 2000, ("wait", Level(5, 1))),
    ],
)
def test_next_step(due: int, now: int, step: tuple[str, object]) -> None:
    assert delay.next_step(due, now) == step


@pytest.mark.parametrize(
    ("delay_ms", "writes"),
    [
        (0, 0),
        (999, 0),
        (1000, 1),
        (119_000, 3),  # the seed's example: 100 s, then 10 s, then 9 s
        (60_000, 1),
        (59_999, 2),  # 50 s, 9 s (the last 999 ms in memory)
        (3 * 3_600_000, 2),  # 10^7 ms, then 8 × 10^5 ms
        (90 * DAY, 4),  # 7,776,000,000: digits 7, 7, 7, 6
    ],
)
def test_level_writes(delay_ms: int, writes: int) -> None:
    assert delay.level_writes(delay_ms) == writes


def test_level_writes_bound_holds_for_every_delay_up_to_90_days() -> None:
    rng = random.Random(7)
    for _ in range(20_000):
        d = rng.randrange(0, 90 * DAY + 1)
        assert delay.level_writes(d) <= 7
        if d < 100_000:
            assert delay.level_writes(d) <= 2


def test_following_the_steps_never_delivers_early_and_stays_within_the_bound() -> None:
    """Simulate a record through the levels with each level releasing it late by up to 30 ms:
    it is never delivered before it is due, and it costs at most one level write per decade."""
    rng = random.Random(11)
    for _ in range(2_000):
        now = 1_700_000_000_000
        d = rng.randrange(0, 30 * DAY)
        due, writes = now + d, 0
        while True:
            kind, arg = delay.next_step(due, now)
            if kind == "deliver":
                break
            if kind == "hold":
                assert isinstance(arg, int)
                now += arg
                continue
            assert isinstance(arg, Level)
            writes += 1
            now += arg.delay_ms + rng.randrange(0, 31)
        assert now >= due
        assert writes <= len(str(max(d // delay.FIRST_LEVEL_MS, 1)))


def test_levels_layout() -> None:
    assert len(delay.LEVELS) == 63
    assert [lv.delay_ms for lv in delay.LEVELS] == sorted(lv.delay_ms for lv in delay.LEVELS)
    topics = delay.level_topics("__ferry_delay")
    assert [t for t, _, _ in topics] == [
        "__ferry_delay.1s",
        "__ferry_delay.10s",
        "__ferry_delay.100s",
        "__ferry_delay.1000s",
        "__ferry_delay.10000s",
        "__ferry_delay.100000s",
        "__ferry_delay.1000000s",
    ]
    assert all(parts == 9 for _, parts, _ in topics)
    assert Level(9, 9).topic("__ferry_delay") == "__ferry_delay.1000000s" and Level(9, 9).partition == 8
    # Each decade's retention outlasts its longest level.
    for (_, _, retention), k in zip(topics, delay.DECADES, strict=True):
        assert retention > 9 * 10**k


H = delay.DELIVER_AT_HEADER
T = delay.TARGET_TOPIC_HEADER
P = delay.TARGET_PARTITION_HEADER


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(H, b"1700000000000"), (T, b"orders")], (1_700_000_000_000, "orders", None)),
        ([("Ferry-Deliver-At", b" 5 "), ("FERRY-TARGET-TOPIC", b"a.b-c_d")], (5, "a.b-c_d", None)),
        ([(H, b"7"), (T, b"t"), (H, b"9")], (7, "t", None)),  # the first of a repeated header counts
        ([(H, b"7"), (T, b"t"), (P, b"0")], (7, "t", 0)),
        ([(H, b"7"), (T, b"t"), ("Ferry-Target-Partition", b" 12 ")], (7, "t", 12)),
    ],
)
def test_parse_schedule(headers: list[tuple[str, bytes | None]], expected: tuple[int, str, int | None]) -> None:
    assert delay.parse_schedule(headers) == delay.Schedule(*expected)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (None, "missing header ferry-deliver-at"),
        ([(T, b"orders")], "missing header ferry-deliver-at"),
        ([(H, None), (T, b"orders")], "missing header ferry-deliver-at"),
        ([(H, b"soon"), (T, b"orders")], "must be an integer"),
        ([(H, b"\xff"), (T, b"orders")], "must be an integer"),
        ([(H, b"1.5"), (T, b"orders")], "must be an integer"),
        ([(H, b"-1"), (T, b"orders")], "must not be negative"),
        ([(H, b"1")], "missing header ferry-target-topic"),
        ([(H, b"1"), (T, b"")], "missing header ferry-target-topic"),
        ([(H, b"1"), (T, b"\xff\xfe")], "is not UTF-8"),
        ([(H, b"1"), (T, b"a/b")], "not a valid topic name"),
        ([(H, b"1"), (T, b"..")], "not a valid topic name"),
        ([(H, b"1"), (T, b"x" * 250)], "not a valid topic name"),
        ([(H, b"1"), (T, b"t"), (P, b"-1")], "ferry-target-partition must be a partition number"),
        ([(H, b"1"), (T, b"t"), (P, b"one")], "ferry-target-partition must be a partition number"),
        ([(H, b"1"), (T, b"t"), (P, b"")], "ferry-target-partition must be a partition number"),
    ],
)
def test_parse_schedule_refuses_garbage_with_a_clear_reason(
    headers: list[tuple[str, bytes | None]] | None, message: str
) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        delay.parse_schedule(headers)


OWN = frozenset({"ferry-state", "delays", "delays.1s"})  # configured names of Ferry's own topics


@pytest.mark.parametrize(
    ("schedule", "partitions", "message"),
    [
        (delay.Schedule(1, "ghost1"), None, "'ghost1' does not exist .*create it"),
        (delay.Schedule(1, "__ferry_offsets"), 9, "internal topic"),
        (delay.Schedule(1, "__consumer_offsets"), 50, "internal topic"),
        (delay.Schedule(1, "__anything"), None, "internal topic"),
        (delay.Schedule(1, "ferry-state"), 1, "internal topic"),  # configured without the __ prefix
        (delay.Schedule(1, "delays.1s"), 9, "internal topic"),
        (delay.Schedule(1, "orders", 3), 3, "ferry-target-partition 3 does not exist: .*partitions 0-2"),
    ],
)
def test_check_target_refuses_missing_and_internal_targets(
    schedule: delay.Schedule, partitions: int | None, message: str
) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        delay.check_target(schedule, partitions, OWN)


@pytest.mark.parametrize(
    ("schedule", "partitions"),
    [
        (delay.Schedule(1, "orders"), 1),
        (delay.Schedule(1, "orders", 2), 3),
        (delay.Schedule(1, "_single_underscore"), 1),
        (delay.Schedule(1, "billing.retry"), 1),  # a durable retry's target
    ],
)
def test_check_target_lets_existing_application_topics_through(schedule: delay.Schedule, partitions: int) -> None:
    delay.check_target(schedule, partitions, OWN)


def test_a_delivered_record_keeps_its_headers_and_deliver_at_but_not_its_routing() -> None:
    headers: list[tuple[str, bytes | None]] = [
        ("app", b"1"),
        (H, b"5"),
        (T, b"orders"),
        ("FERRY-TARGET-TOPIC", b"orders"),
        (P, b"0"),
        ("ferry-source-topic", b"s"),  # a durable retry's: read from the retry topic
        ("empty", None),
    ]
    assert delay.delivered_headers(headers) == [("app", b"1"), (H, b"5"), ("ferry-source-topic", b"s"), ("empty", None)]


def test_check_delay_accepts_up_to_90_days_and_the_past() -> None:
    delay.check_delay(0, 10**12)  # in the past: deliver now
    delay.check_delay(10**12 + 90 * DAY, 10**12)
    with pytest.raises(InvalidSchedule, match="90 days") as refused:
        delay.check_delay(10**12 + 90 * DAY + 1, 10**12)
    # 1 ms over: the message says by how much, not "90.0 days ahead; up to 90 days are accepted"
    assert "7,776,000,001 ms ahead, 1 ms more than the longest delay accepted, 90 days (7,776,000,000 ms)" in str(
        refused.value
    )


# --- the delay store's sink in virtual time: a long delay cascades through the levels ------------


@pytest.mark.parametrize("delay_ms", [3 * 3_600_000, 3 * 3_600_000 + 1_234, 119_000, 250, 7 * DAY + 5])
def test_the_sink_cascades_a_record_through_the_levels_docs_promise(
    delay_ms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """worker/sinks.DelaySink with a virtual clock: each write to a level topic comes back as a
    record of that level (as its owner would read it), until the record is written to its target
    — no earlier than due, after exactly :func:`delay.level_writes` level writes."""
    import asyncio

    from ferry.worker import sinks
    from ferry.worker.push import Record
    from tests.support.vtime import run

    epoch_ms = 1_800_000_000_000

    def now_ms() -> int:
        return epoch_ms + int(asyncio.get_running_loop().time() * 1000)

    monkeypatch.setattr(sinks, "now_ms", now_ms)
    writes: list[tuple[str, int | None, int]] = []  # (topic, partition, at)

    class Producer:
        async def send(
            self, topic: str, value: bytes | None, key: bytes | None, headers: object, partition: int | None = None
        ) -> None:
            writes.append((topic, partition, now_ms()))

    async def main() -> None:
        sink = sinks.DelaySink(Producer(), "__d")  # type: ignore[arg-type]
        due = now_ms() + delay_ms
        headers = [(delay.DELIVER_AT_HEADER, str(due).encode()), (delay.TARGET_TOPIC_HEADER, b"orders")]
        record = Record("__d", 0, 0, b"k", b"v", headers, now_ms())
        for _ in range(50):  # bounded: a cascade is at most a few dozen writes
            result = await sink.push(record)
            assert result.status == 200
            topic, partition, at = writes[-1]
            if topic == "orders":
                assert at >= due and at - due < 5  # on time to the millisecond in virtual time
                return
            assert partition is not None
            record = Record(topic, partition, len(writes), b"k", b"v", headers, at)
        raise AssertionError(f"no delivery after {len(writes)} writes")

    run(main())
    assert len(writes) - 1 == delay.level_writes(delay_ms)
