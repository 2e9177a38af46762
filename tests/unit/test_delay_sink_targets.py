"""What the delay sink writes when a record is due: to its existing target topic (and partition),
without the routing headers; to ``<delay topic>.dlq`` with ``ferry-error`` when the target does not
exist or is internal; nothing while the topics cannot be listed (503: retried)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ferry import delay, kafka
from ferry.worker import sinks
from ferry.worker.push import Record

NOW = 1_800_000_000_000
TOPIC = "__ferry_delay"


class Topics:
    """A TopicCache that knows ``known`` (or cannot list, ``down``)."""

    def __init__(self, known: dict[str, int], down: bool = False) -> None:
        self.known, self.down = known, down

    async def partitions_exact(self, topic: str) -> int | None:
        if self.down:
            raise kafka.KafkaUnavailable("cannot list topics: broker down")
        return self.known.get(topic)


class Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, Any, int | None]] = []

    async def send(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any, partition: int | None = None
    ) -> None:
        self.sent.append((topic, value, headers, partition))


def due(target: bytes, *extra: tuple[str, bytes], at: int = NOW - 5) -> Record:
    headers = [("app", b"1"), (delay.DELIVER_AT_HEADER, str(at).encode()), (delay.TARGET_TOPIC_HEADER, target), *extra]
    return Record(TOPIC, 0, 7, b"k", b"v", headers, NOW - 10)


def push(record: Record, topics: Topics, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Producer, sinks.DelaySink]:
    monkeypatch.setattr(sinks, "now_ms", lambda: NOW)
    producer = Producer()
    sink = sinks.DelaySink(producer, TOPIC, topics, frozenset({"ferry-own"}))  # type: ignore[arg-type]
    result = asyncio.run(sink.push(record))
    return result.status, producer, sink


def test_a_due_record_goes_to_its_partition_without_its_routing_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    record = due(b"orders", (delay.TARGET_PARTITION_HEADER, b"2"))
    status, producer, sink = push(record, Topics({"orders": 3}), monkeypatch)
    assert status == 200 and sink.delivered == 1
    assert producer.sent == [("orders", b"v", [("app", b"1"), (delay.DELIVER_AT_HEADER, str(NOW - 5).encode())], 2)]


def test_without_a_partition_the_key_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    status, producer, _ = push(due(b"orders"), Topics({"orders": 3}), monkeypatch)
    assert status == 200 and producer.sent[0][0] == "orders" and producer.sent[0][3] is None


@pytest.mark.parametrize(
    ("record", "error"),
    [
        (due(b"ghost1"), "'ghost1' does not exist"),
        (due(b"__ferry_offsets"), "internal topic"),
        (due(b"__consumer_offsets"), "internal topic"),
        (due(b"ferry-own"), "internal topic"),
        (due(b"orders", (delay.TARGET_PARTITION_HEADER, b"3")), "ferry-target-partition 3 does not exist"),
    ],
)
def test_a_target_that_is_missing_or_internal_is_dead_lettered(
    record: Record, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    known = {"orders": 3, "__ferry_offsets": 9, "__consumer_offsets": 50, "ferry-own": 1}
    status, producer, sink = push(record, Topics(known), monkeypatch)
    assert status == 200 and sink.invalid == 1 and sink.delivered == 0
    ((topic, value, headers, _),) = producer.sent
    assert (topic, value) == (f"{TOPIC}.dlq", b"v")
    assert error in dict(headers)[delay.ERROR_HEADER].decode()


def test_while_topics_cannot_be_listed_nothing_is_written_and_it_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    status, producer, sink = push(due(b"orders"), Topics({}, down=True), monkeypatch)
    assert status == 503 and producer.sent == [] and sink.invalid == 0


def test_a_due_time_before_the_record_was_written_is_not_counted_as_lateness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ferry-deliver-at: 123`` means now: late by the time since it was written, not by 56 years."""
    status, _, sink = push(due(b"orders", at=123), Topics({"orders": 1}), monkeypatch)
    assert status == 200 and sink.late_ms == [10]
