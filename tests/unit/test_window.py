"""Ordering window: per-key order, concurrency across keys, the in-flight bound."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from worker.window import Window


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None


def recs(*keys: str | None) -> list[Rec]:
    return [Rec(i, None if k is None else k.encode()) for i, k in enumerate(keys)]


@pytest.mark.parametrize(
    ("ordering", "limit", "keys", "first_take"),
    [
        ("key", 10, ["a", "a", "b", "c", "b"], [0, 2, 3]),  # one per key
        ("key", 2, ["a", "b", "c"], [0, 1]),  # bounded by max_in_flight
        ("key", 10, [None, None, "a", "a"], [0, 1, 2]),  # null keys have no order between them
        ("partition", 10, ["a", "b", "c"], [0]),  # one at a time
        ("none", 10, ["a", "a", "a"], [0, 1, 2]),  # free
        ("none", 2, ["a", "a", "a"], [0, 1]),
    ],
)
def test_first_take(ordering: str, limit: int, keys: list[str | None], first_take: list[int]) -> None:
    w: Window[Rec] = Window(ordering, limit)
    for r in recs(*keys):
        w.add(r)
    assert [r.offset for r in w.take()] == first_take
    assert w.in_flight == len(first_take)
    assert w.take() == []


def test_key_order_kept_while_other_keys_flow() -> None:
    w: Window[Rec] = Window("key", 10)
    a0, a1, b0, b1, a2 = recs("a", "a", "b", "b", "a")
    for r in (a0, a1, b0, b1, a2):
        w.add(r)
    assert w.take() == [a0, b0]
    # a0 is stuck (e.g. waiting for a retry): b keeps going, a does not.
    w.finish(b0)
    assert w.take() == [b1]
    w.finish(b1)
    assert w.take() == []
    w.finish(a0)
    assert w.take() == [a1]
    w.finish(a1)
    assert w.take() == [a2]
    w.finish(a2)
    assert (w.in_flight, w.pending) == (0, 0)


def test_clear_returns_pending_in_offset_order_and_reconfigure_relanes() -> None:
    w: Window[Rec] = Window("partition", 10)
    rs = recs("a", "b", "c", "d")
    for r in rs:
        w.add(r)
    assert w.take() == [rs[0]]
    w.reconfigure("none", 2)
    assert w.take() == [rs[1]]  # one slot left: rs[0] is still in flight
    w.finish(rs[0])
    assert w.take() == [rs[2]]
    assert w.clear() == [rs[3]]
    assert w.pending == 0


def test_bad_settings() -> None:
    with pytest.raises(ValueError):
        Window("random", 1)
    with pytest.raises(ValueError):
        Window("key", 0)
