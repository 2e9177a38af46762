"""Whole numbers written in ASCII digits, the one form Ferry reads from text it is sent.

Use case: a query parameter, a ``Retry-After`` header and a seed ``x-delay`` header each carry a
non-negative integer as text. ``str.isdigit()`` alone also takes ``²`` and ``١``, which ``int()``
or ``float()`` then refuse (a crash where a clear refusal is due), so every reader checks with
:func:`ascii_digits` first. Pure.
"""

from __future__ import annotations


def ascii_digits(raw: str) -> bool:
    """``raw`` is one or more ASCII digits and nothing else: not ``""``, ``"+3"``, ``"1_000"``,
    ``"1.5"``, ``" 7"`` or ``"²"``."""
    return raw.isascii() and raw.isdigit()
