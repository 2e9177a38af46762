"""Where a ``start_from: latest`` subscription starts the partitions it met later (coordinator.starts)."""

from __future__ import annotations

import pytest

from ferry.coordinator import starts
from ferry.subscription import Subscription, parse


def sub(name: str, topics: list[str], start_from: str = "latest") -> Subscription:
    return parse({"name": name, "topics": topics, "endpoint": {"url": "http://127.0.0.1:1/"}, "start_from": start_from})


@pytest.mark.parametrize(
    ("known", "counts", "missing", "expected"),
    [
        # first meeting: the current count, 0 for a topic Kafka says does not exist
        ({}, {"a": 3}, {"b"}, {"s": {"a": 3, "b": 0}}),
        # recorded once: a topic that grew (a: 3 -> 5) or appeared (b) keeps its record
        ({"s": {"a": 3, "b": 0}}, {"a": 5, "b": 2}, set(), {"s": {"a": 3, "b": 0}}),
        # count unknown (Kafka unreachable): nothing recorded yet, rather than a guess
        ({}, {}, set(), {"s": {}}),
        ({}, {"a": 3}, set(), {"s": {"a": 3}}),
        # a deleted subscription's record goes; the others stay
        ({"s": {"a": 1, "b": 0}, "gone": {"a": 1}}, {"a": 3, "b": 1}, set(), {"s": {"a": 1, "b": 0}}),
    ],
)
def test_record(known: starts.Known, counts: dict[str, int], missing: set[str], expected: starts.Known) -> None:
    before = {k: dict(v) for k, v in known.items()}
    assert starts.record(known, [sub("s", ["a", "b"])], counts, missing) == expected
    assert known == before  # a new table; the leader compares it with what it wrote


def test_record_adds_a_topic_added_to_the_subscription() -> None:
    assert starts.record({"s": {"a": 3}}, [sub("s", ["a", "c"])], {"a": 4, "c": 2}, set()) == {"s": {"a": 3, "c": 2}}


@pytest.mark.parametrize(
    ("start_from", "topic", "partition", "expected"),
    [
        ("latest", "a", 2, False),  # existed when the subscription started: its end
        ("latest", "a", 3, True),  # added later
        ("latest", "b", 0, True),  # the topic was created later
        ("latest", "c", 0, False),  # not recorded (yet): as start_from says
        ("earliest", "a", 5, False),  # earliest starts everything at its beginning anyway
    ],
)
def test_from_beginning(start_from: str, topic: str, partition: int, expected: bool) -> None:
    known = {"s": {"a": 3, "b": 0}}
    assert starts.from_beginning(sub("s", ["a", "b", "c"], start_from), topic, partition, known) is expected
