"""``ascii_digits``: the one check every reader of a whole number in text makes first."""

from __future__ import annotations

import pytest

from ferry.digits import ascii_digits


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0", True),
        ("7", True),
        ("0042", True),
        ("12345678901234567890", True),
        ("", False),
        ("+3", False),
        ("-3", False),
        ("1_000", False),
        ("1.5", False),
        (" 7", False),
        ("7 ", False),
        ("²", False),  # str.isdigit() takes it; int() refuses it
        ("١٢", False),  # Arabic-Indic digits: int() takes them, Ferry does not
        ("1e3", False),
    ],
)
def test_ascii_digits(raw: str, expected: bool) -> None:
    assert ascii_digits(raw) is expected
    if expected:
        assert int(raw) >= 0
