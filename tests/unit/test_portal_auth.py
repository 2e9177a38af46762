"""Bearer parsing and the failed-login rate limit."""

from __future__ import annotations

import pytest

from ferry.guessing import FailedLogins
from ferry.portal.auth import bearer


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer  ", None),
        ("Bearer abc", "abc"),
        ("bearer abc ", "abc"),
    ],
)
def test_bearer(header: str | None, token: str | None) -> None:
    assert bearer(header) == token


def test_blocks_after_limit_and_recovers() -> None:
    f = FailedLogins(limit=3, window_s=10, block_s=30)
    for t in (0.0, 1.0):
        f.failed("a", t)
        assert f.blocked_for_s("a", t) == 0
    f.failed("a", 2.0)
    assert f.blocked_for_s("a", 2.0) == 30
    assert f.blocked_for_s("b", 2.0) == 0  # other clients unaffected
    assert f.blocked_for_s("a", 32.0) == 0  # block over


def test_failures_outside_the_window_do_not_count() -> None:
    f = FailedLogins(limit=3, window_s=10, block_s=30)
    for t in (0.0, 11.0, 22.0, 33.0):
        f.failed("a", t)
    assert f.blocked_for_s("a", 33.0) == 0


def test_other_addresses_are_counted_apart() -> None:
    f = FailedLogins(limit=2, window_s=10, block_s=30)
    f.failed("a", 0.0)
    f.failed("b", 1.0)
    assert f.blocked_for_s("a", 1.0) == 0 and f.blocked_for_s("b", 1.0) == 0
    f.failed("a", 2.0)
    assert f.blocked_for_s("a", 2.0) == 30.0 and f.blocked_for_s("b", 2.0) == 0  # from its last failure
