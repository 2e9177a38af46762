"""Ordering window: per-key order, concurrency across keys, the in-flight bound."""

from __future__ import annotations

import random
from collections.abc import Callable
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


# --- ordering=none: one queue, never busy ------------------------------------------------------


class FifoModel:
    """What ``none`` means: records leave in offset order, bounded only by the in-flight limit (and
    a batch's records and bytes); nothing waits for anything else."""

    def __init__(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        self.queue: list[Rec] = []
        self.in_flight: set[int] = set()

    def take(self) -> list[Rec]:
        n = max(0, min(len(self.queue), self.max_in_flight - len(self.in_flight)))
        out, self.queue = self.queue[:n], self.queue[n:]
        self.in_flight.update(r.offset for r in out)
        return out

    def take_batch(self, max_records: int, max_bytes: int, size: Callable[[Rec], int]) -> list[Rec]:
        room = min(max_records, self.max_in_flight - len(self.in_flight))
        out: list[Rec] = []
        used = 0
        while self.queue and len(out) < room:
            s = size(self.queue[0])
            if out and used + s > max_bytes:
                break
            used += s
            out.append(self.queue.pop(0))
        self.in_flight.update(r.offset for r in out)
        return out


def weight(r: Rec) -> int:
    return 5 + r.offset % 7 * 10


@pytest.mark.parametrize("seed", range(8))
def test_none_is_a_fifo(seed: int) -> None:
    """Random adds (one by one and in bulk), takes, batches (with and without the raw-size bound)
    and acknowledgements (one by one, in bulk, twice, of unknown offsets): the window gives what
    the FIFO model gives."""
    rng = random.Random(seed)
    limit = rng.choice([1, 3, 16, 64])
    w: Window[Rec] = Window("none", limit)
    model = FifoModel(limit)
    taken: list[Rec] = []
    nxt = 0
    for _ in range(400):
        op = rng.randrange(6)
        if op == 0:
            r = Rec(nxt, rng.choice([b"a", b"b", None]))
            nxt += 1
            w.add(r)
            model.queue.append(r)
        elif op == 1:
            chunk = [Rec(nxt + i, b"a") for i in range(rng.randrange(1, 40))]
            nxt += len(chunk)
            w.add_many(chunk)
            model.queue += chunk
        elif op == 2:
            got = w.take()
            assert got == model.take()
            taken += got
        elif op == 3:
            max_records, max_bytes = rng.choice([1, 5, 100]), rng.choice([30, 200, 10_000])
            bound = weight if rng.random() < 0.5 else None
            got = w.take_batch(max_records, max_bytes, weight, bound)
            assert got == model.take_batch(max_records, max_bytes, weight)
            taken += got
        elif op == 4 and taken:
            rng.shuffle(taken)
            done, taken = taken[: rng.randrange(len(taken) + 1)], taken[len(taken) // 2 :]
            done = [r for r in done if r.offset in model.in_flight]
            w.finish_offsets([r.offset for r in done] + [10**9])  # an unknown offset is a no-op
            model.in_flight -= {r.offset for r in done}
        elif op == 5 and taken:
            r = taken.pop(rng.randrange(len(taken)))
            w.finish(r)
            w.finish(r)  # twice: the second is a no-op
            model.in_flight.discard(r.offset)
        assert (w.in_flight, w.pending) == (len(model.in_flight), len(model.queue))


def test_none_batches_fill_and_the_queue_resumes_after_a_full_window() -> None:
    w: Window[Rec] = Window("none", 4)
    rs = recs("a", "a", "b", None, "a", "a")
    w.add_many(rs)
    assert w.take_batch(100, 10_000, weight, weight) == rs[:4]  # keys do not matter; the window bounds it
    assert w.take_batch(100, 10_000, weight, weight) == []
    w.finish_offsets([1, 3])
    assert w.take() == rs[4:6]
    w.finish(rs[0])
    assert (w.in_flight, w.pending) == (3, 0)
    w.add(Rec(6, b"a"))
    assert w.take() == [Rec(6, b"a")]


@pytest.mark.parametrize(("to", "first", "left"), [("key", [2, 3], []), ("partition", [2], [3])])
def test_reconfigure_none_to_ordered_and_back_with_records_in_flight(
    to: str, first: list[int], left: list[int]
) -> None:
    w: Window[Rec] = Window("none", 10)
    rs = recs("a", "a", "b", "a")
    w.add_many(rs)
    assert w.take_batch(2, 10_000, weight) == rs[:2]  # in flight under the one queue of none
    w.reconfigure(to, 10)
    assert [r.offset for r in w.take()] == first  # records taken under none hold no key or partition back
    w.finish(rs[0])
    w.finish_offsets([1])  # and finishing them makes nothing ready twice
    assert w.take() == []
    w.reconfigure("none", 10)  # `first` still in flight under their lanes
    for o in first:
        w.finish(rs[o])
    assert [r.offset for r in w.take()] == left
    assert (w.in_flight, w.pending) == (len(left), 0)


def test_none_finish_while_records_wait_does_not_queue_the_queue_twice() -> None:
    w: Window[Rec] = Window("none", 2)
    rs = recs("a", "b", "c", "d")
    w.add_many(rs[:3])
    assert w.take() == rs[:2]
    w.finish(rs[0])  # rs[2] is waiting: the queue is ready already
    assert w.take() == [rs[2]]
    w.finish(rs[1])
    w.finish(rs[2])
    w.add(rs[3])
    assert w.take() == [rs[3]]
    assert w.take() == []
