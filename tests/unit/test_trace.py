"""Record trace (ferry.trace): the state of one record from offsets, window, dead letters, filter."""

from __future__ import annotations

from typing import Any

import pytest

from ferry import trace
from ferry.trace import DeadLetter, Live

BASE: dict[str, Any] = {
    "topic": "orders",
    "partition": 3,
    "log_start": 100,
    "log_end": 500,
    "committed": 200,
    "acked": [[203, 210], [300, 301]],
    "worker": "w1",
}

CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "below committed: delivered": ({"offset": 150}, {"state": "delivered", "worker": None}),
    "inside an acked range: delivered": ({"offset": 205}, {"state": "delivered"}),
    "acked range is half-open": ({"offset": 210}, {"state": "not_yet_fetched", "worker": "w1"}),
    "the gap above committed: not yet fetched": ({"offset": 201}, {"state": "not_yet_fetched"}),
    "before the log start: not in log": ({"offset": 99}, {"state": "not_in_log"}),
    "at the log end: not in log": ({"offset": 500}, {"state": "not_in_log"}),
    "past the log end: not in log": ({"offset": 10**9}, {"state": "not_in_log"}),
    "held in flight by the worker": (
        {"offset": 250, "live": Live("in_flight", attempts=1)},
        {"state": "in_flight", "attempts": 1, "worker": "w1", "next_attempt_at": None},
    ),
    "waiting for a retry": (
        {"offset": 250, "live": Live("waiting_retry", 3, 503, "HTTP 503", next_attempt_at=1_700_000_000_500)},
        {"state": "waiting_retry", "attempts": 3, "last_status": 503, "next_attempt_at": 1_700_000_000_500},
    ),
    "acknowledged by a dead letter": (
        {"offset": 150, "dead_letter": DeadLetter(5, "HTTP 500")},
        {"state": "dead_lettered", "attempts": 5, "last_error": "HTTP 500", "last_status": None},
    ),
    "a dead letter's status, read from its error": (
        {"offset": 150, "dead_letter": DeadLetter(2, "endpoint answered 500; gave up after 2 attempts")},
        {"state": "dead_lettered", "attempts": 2, "last_status": 500},
    ),
    "a dead letter of a batch the endpoint refused": (
        {"offset": 150, "dead_letter": DeadLetter(1, "endpoint answered 413 for the batch")},
        {"state": "dead_lettered", "last_status": 413},
    ),
    "a dead letter after timeouts has no status": (
        {"offset": 150, "dead_letter": DeadLetter(5, "timed out after 5000 ms; gave up after 5 attempts")},
        {"state": "dead_lettered", "last_status": None},
    ),
    "acknowledged without a push: filtered": ({"offset": 300, "filtered": True}, {"state": "filtered"}),
    "a dead letter wins over the filter": (
        {"offset": 150, "filtered": True, "dead_letter": DeadLetter(1, "HTTP 400")},
        {"state": "dead_lettered"},
    ),
    "no offset state yet: not yet fetched": (
        {"offset": 150, "committed": None, "acked": []},
        {"state": "not_yet_fetched"},
    ),
    "acknowledged in its partition, a durable retry waits in the delay store": (
        {"offset": 150, "retrying": Live("waiting_retry", 1, 503, None, 1_700_000_000_500), "retrying_worker": "w2"},
        {
            "state": "waiting_retry",
            "attempts": 1,
            "last_status": 503,
            "worker": "w2",
            "next_attempt_at": 1_700_000_000_500,
        },
    ),
    "acknowledged in its partition, pushed again from the retry topic": (
        {"offset": 150, "retrying": Live("in_flight", 2, 503, None, None), "retrying_worker": "w2"},
        {"state": "in_flight", "attempts": 2, "worker": "w2", "next_attempt_at": None},
    ),
    "a redriven dead letter being pushed again outranks its dead letter": (
        {"offset": 150, "retrying": Live("in_flight", 1), "dead_letter": DeadLetter(3, "HTTP 500")},
        {"state": "in_flight", "attempts": 1},
    ),
    "a retry does not outrank a record not yet acknowledged": (
        {"offset": 250, "retrying": Live("in_flight", 2), "live": Live("waiting_retry", 1)},
        {"state": "waiting_retry", "attempts": 1},
    ),
    "a stale live entry does not outrank the offset state": (
        {"offset": 150, "live": Live("in_flight", 1)},
        {"state": "delivered", "attempts": None},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_decide(name: str) -> None:
    given, expected = CASES[name]
    answer = trace.decide(**{**BASE, **given})
    assert set(answer) == {
        "topic",
        "partition",
        "offset",
        "state",
        "attempts",
        "last_status",
        "last_error",
        "worker",
        "next_attempt_at",
    }
    assert answer["offset"] == given["offset"] and answer["topic"] == "orders" and answer["partition"] == 3
    for key, value in expected.items():
        assert answer[key] == value, (key, answer)
