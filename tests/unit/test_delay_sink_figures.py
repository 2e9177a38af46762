"""What a worker's delay sink reports as ``next_due``: the due time of the records it holds, in its
sink and at the head of each level partition it owns (a record waiting in a level is held back in
the fetch buffer, not in the sink)."""

from __future__ import annotations

import gc

from ferry import delay
from ferry.worker.push import Record
from ferry.worker.sinks import LEVEL_LEAD_MS, DelaySink

TOPIC = "__ferry_delay"
NOW = 1_800_000_000_000


def scheduled(level_topic: str, partition: int, written_ms: int, due_ms: int) -> Record:
    headers = ((delay.DELIVER_AT_HEADER, str(due_ms).encode()), (delay.TARGET_TOPIC_HEADER, b"orders"))
    return Record(level_topic, partition, 0, b"k", b"v", headers, written_ms)


def test_a_record_held_at_a_level_head_is_the_next_due() -> None:
    sink = DelaySink(None, TOPIC)  # type: ignore[arg-type]  # nothing is written here
    level = delay.Level(4, 6)  # 60 s
    hold = sink.level_hold(level.topic(TOPIC), level.partition)
    assert hold is not None and sink.next_due(NOW) is None
    head = scheduled(level.topic(TOPIC), level.partition, NOW - 1_000, NOW + 63_000)
    assert hold(head) == NOW - 1_000 + 60_000 - LEVEL_LEAD_MS  # when it may start
    assert sink.next_due(NOW) == NOW + 63_000  # its due time, not the moment it leaves the level


def test_a_head_whose_level_time_passed_is_the_sinks_not_the_holds() -> None:
    sink = DelaySink(None, TOPIC)  # type: ignore[arg-type]
    level = delay.Level(4, 6)
    hold = sink.level_hold(level.topic(TOPIC), level.partition)
    assert hold is not None
    hold(scheduled(level.topic(TOPIC), level.partition, NOW - 61_000, NOW + 2_000))  # taken: in the sink now
    assert sink.next_due(NOW) is None


def test_a_released_partitions_head_is_forgotten() -> None:
    sink = DelaySink(None, TOPIC)  # type: ignore[arg-type]
    level = delay.Level(5, 2)
    hold = sink.level_hold(level.topic(TOPIC), level.partition)
    assert hold is not None
    hold(scheduled(level.topic(TOPIC), level.partition, NOW, NOW + 250_000))
    assert sink.next_due(NOW) == NOW + 250_000
    del hold  # the runner and its delivery let it go
    gc.collect()
    assert sink.next_due(NOW) is None


def test_the_earliest_of_several_heads() -> None:
    sink = DelaySink(None, TOPIC)  # type: ignore[arg-type]
    holds = []
    for decade, partition, due in ((4, 8, NOW + 85_000), (3, 2, NOW + 3_000), (5, 0, NOW + 150_000)):
        level = delay.Level(decade, partition + 1)
        hold = sink.level_hold(level.topic(TOPIC), partition)
        assert hold is not None
        hold(scheduled(level.topic(TOPIC), partition, NOW, due))
        holds.append(hold)
    assert sink.next_due(NOW) == NOW + 3_000


def test_the_entry_topic_holds_nothing_back() -> None:
    assert DelaySink(None, TOPIC).level_hold(TOPIC, 0) is None  # type: ignore[arg-type]
