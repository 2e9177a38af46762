"""Retry policy: the schedule and what each answer means (docs/contract.md §4)."""

from __future__ import annotations

import random

import pytest

from ferry.subscription import RetryPolicySpec
from ferry.worker.retry import RetryPolicy, parse_retry_after

SPEC = RetryPolicySpec(max_attempts=5, initial_backoff_ms=200, max_backoff_ms=1000)


class MaxRng(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize(
    ("attempt", "status", "retry_after", "action", "delay_s"),
    [
        (1, 200, None, "ack", 0.0),
        (1, 204, None, "ack", 0.0),
        (1, 500, None, "retry", 0.2),
        (2, 502, None, "retry", 0.4),
        (3, 503, None, "retry", 0.8),
        (4, 500, None, "retry", 1.0),  # capped at max_backoff_ms
        (5, 500, None, "dead_letter", 0.0),  # max_attempts reached
        (1, 408, None, "retry", 0.2),
        (1, 429, 1.0, "retry", 1.0),  # Retry-After honoured
        (1, 503, 0.5, "retry", 0.5),
        (1, 429, 60.0, "retry", 1.0),  # ... but capped
        (1, 500, 0.01, "retry", 0.2),  # Retry-After only on 429/503
        (5, 429, 1.0, "dead_letter", 0.0),  # a 429 counts as an attempt
        (1, 400, None, "dead_letter", 0.0),
        (1, 404, None, "dead_letter", 0.0),
        (1, 410, None, "dead_letter", 0.0),
        (1, 301, None, "dead_letter", 0.0),  # redirects are not followed
        (1, 101, None, "dead_letter", 0.0),
    ],
)
def test_after_status(attempt: int, status: int, retry_after: float | None, action: str, delay_s: float) -> None:
    d = RetryPolicy(SPEC, MaxRng()).after_status(attempt, status, retry_after)
    assert d.action == action
    assert d.delay_s == pytest.approx(delay_s)


def test_errors_retry_until_max_attempts() -> None:
    p = RetryPolicy(SPEC, MaxRng())
    assert p.after_error(1, "timed out").action == "retry"
    last = p.after_error(5, "timed out")
    assert last.action == "dead_letter" and "5 attempts" in last.reason


def test_jitter_stays_within_the_cap() -> None:
    p = RetryPolicy(SPEC, random.Random(1))
    delays = [p.backoff_s(3) for _ in range(500)]
    assert min(delays) >= 0 and max(delays) <= 0.8
    assert len({round(d, 3) for d in delays}) > 100  # really jittered


@pytest.mark.parametrize(
    ("value", "expect"),
    [
        (None, None),
        ("", None),
        ("3", 3.0),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past
        ("soon", None),
        # An endpoint's stray byte (0xB2, read as Latin-1) is unreadable, not a crash of the push.
        ("\u00b2", None),
        ("1\u00b3", None),
    ],
)
def test_parse_retry_after(value: str | None, expect: float | None) -> None:
    now = 1445412480.0  # 2015-10-21T07:28:00Z
    assert parse_retry_after(value, now) == expect
