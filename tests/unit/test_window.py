"""Ordering window: per-key order, concurrency across keys, the in-flight bound."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ferry.worker.window import ORDERINGS, Window
from tests.support.window_model import ModelWindow


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    size: int = 10


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


# --- ordering "none": one FIFO, never busy ----------------------------------------------------


def size(r: Rec) -> int:
    return r.size


def offsets(items: list[Rec]) -> list[int]:
    return [r.offset for r in items]


def take_all(w: Window[Rec], max_records: int, max_bytes: int = 10_000) -> list[list[int]]:
    """take_batch until it gives nothing, as the batch dispatcher's pump does."""
    out = []
    while batch := w.take_batch(max_records, max_bytes, size, size):
        out.append(offsets(batch))
    return out


@pytest.mark.parametrize(
    ("waiting", "max_records", "max_in_flight", "max_bytes", "sizes"),
    [
        (250, 100, 1000, 10_000, [100, 100, 50]),  # every waiting record may go: batches fill to max_records
        (42, 100, 1000, 10_000, [42]),  # what waits goes now (bench/pipeline.py takes after each fetch of 42)
        (250, 100, 120, 10_000, [100, 20]),  # the in-flight bound spans batches
        (250, 100, 1000, 205, [20] * 12 + [10]),  # max_bytes (records of 10 bytes)
    ],
)
def test_none_batches_take_waiting_records_in_offset_order(
    waiting: int, max_records: int, max_in_flight: int, max_bytes: int, sizes: list[int]
) -> None:
    w: Window[Rec] = Window("none", max_in_flight)
    w.add_many([Rec(i, b"k") for i in range(waiting)])
    batches = take_all(w, max_records, max_bytes)
    assert [len(b) for b in batches] == sizes
    assert [o for b in batches for o in b] == list(range(sum(sizes)))
    assert (w.in_flight, w.pending) == (sum(sizes), waiting - sum(sizes))


def test_none_in_flight_bound_with_take_and_take_batch() -> None:
    w: Window[Rec] = Window("none", 3)
    rs = recs("a", "a", "a", "a", "a", "a", "a")
    for r in rs:
        w.add(r)
    assert offsets(w.take()) == [0, 1, 2]
    assert w.take_batch(10, 10_000, size, size) == []
    w.finish(rs[1])
    assert offsets(w.take_batch(10, 10_000, size, size)) == [3]
    w.finish_offsets([0, 2])
    assert offsets(w.take()) == [4, 5]
    assert (w.in_flight, w.pending) == (3, 1)


def test_none_finish_makes_nothing_ready_twice_or_unqueued() -> None:
    w: Window[Rec] = Window("none", 10)
    w.add_many(recs("a", "a", "a", "a"))
    assert offsets(w.take_batch(2, 10_000, size, size)) == [0, 1]
    w.finish(Rec(0, b"a"))
    w.finish_offsets([1])
    assert take_all(w, 10) == [[2, 3]]
    w.finish_offsets([2, 3])
    assert w.take() == [] and w.take_batch(10, 10_000, size) == []
    assert (w.in_flight, w.pending) == (0, 0)


def test_none_to_key_in_flight_records_hold_no_key_back() -> None:
    w: Window[Rec] = Window("none", 10)
    w.add_many(recs("a", "a", "a", "a", "a", "a"))
    assert offsets(w.take_batch(3, 10_000, size, size)) == [0, 1, 2]
    w.reconfigure("key", 10)
    w.finish(Rec(0, b"a"))  # finishes under the none lane: key a is not busy, nothing else is ready
    assert take_all(w, 10) == [[3, 4, 5]]
    w.finish_offsets([1, 2])
    w.add(Rec(6, b"a"))
    assert take_all(w, 10) == []  # key a is busy with 3..5 now
    w.finish_offsets([3, 4, 5])
    assert take_all(w, 10) == [[6]]
    assert (w.in_flight, w.pending) == (1, 0)


def test_key_to_none_and_back_while_a_key_is_busy() -> None:
    w: Window[Rec] = Window("key", 10)
    w.add_many(recs("a", "a", "a", "b"))
    assert take_all(w, 2) == [[0, 1], [3]]  # a is partly taken: 2 waits for 0 and 1
    w.reconfigure("none", 10)
    assert take_all(w, 10) == [[2]]  # none has no order: 2 goes although a is busy
    w.finish_offsets([0, 1])  # a's last in-flight records: a has nothing queued, so it is not made ready
    assert take_all(w, 10) == []
    w.reconfigure("key", 10)
    w.add_many([Rec(4, b"a"), Rec(5, b"b")])
    # 2 was taken under none, 3 under key b: b waits for 3, a waits for nothing.
    assert take_all(w, 10) == [[4]]
    w.finish_offsets([3])
    assert take_all(w, 10) == [[5]]
    w.finish_offsets([2, 4, 5])
    assert (w.in_flight, w.pending) == (0, 0)


def test_partition_to_none_and_back_while_the_partition_batch_is_in_flight() -> None:
    w: Window[Rec] = Window("partition", 10)
    w.add_many(recs("a", "b", "c", "d", "e"))
    assert take_all(w, 2) == [[0, 1]]
    w.reconfigure("none", 10)
    assert take_all(w, 10) == [[2, 3, 4]]
    w.add(Rec(5, b"f"))
    w.reconfigure("partition", 10)
    assert take_all(w, 10) == []  # 0 and 1 were taken under the partition lane: it is still busy
    w.finish_offsets([2, 3, 4])
    assert take_all(w, 10) == []
    w.finish_offsets([0, 1])
    assert take_all(w, 10) == [[5]]


@pytest.mark.parametrize("ordering", ["key", "partition", "none"])
def test_finishing_unknown_offsets_changes_nothing(ordering: str) -> None:
    """Offsets never taken, pending but not taken, or already finished: no-ops."""
    w: Window[Rec] = Window(ordering, 3)
    twin: Window[Rec] = Window(ordering, 3)
    rs = recs("a", "b", "a", "b", "c", None, "c")
    for x in (w, twin):
        x.add_many(rs)
        x.take_batch(2, 10_000, size, size)
        x.finish(rs[0])
    w.finish(Rec(99, b"a"))
    w.finish(rs[0])
    w.finish(rs[6])  # pending, not in flight
    w.finish_offsets([98, 0, 6, 99])
    assert (w.in_flight, w.pending) == (twin.in_flight, twin.pending)
    for x in (w, twin):
        x.finish_offsets([1])
    assert take_all(w, 10) == take_all(twin, 10)
    assert w.take() == twin.take()
    assert w.clear() == twin.clear()


@pytest.mark.parametrize("ordering", ["key", "partition", "none"])
def test_clear_returns_pending_in_offset_order_in_flight_ones_stay(ordering: str) -> None:
    w: Window[Rec] = Window(ordering, 3)
    rs = recs("b", "a", "b", None, "a", "c")
    w.add_many(rs)
    taken = offsets(w.take())
    assert w.clear() == [r for r in rs if r.offset not in taken]
    assert (w.in_flight, w.pending) == (len(taken), 0)
    assert w.take() == [] and w.take_batch(10, 10_000, size) == []
    w.finish_offsets(taken)
    w.add(Rec(6, b"a"))
    assert offsets(w.take()) == [6]


@pytest.mark.parametrize("ordering", ["key", "partition", "none"])
def test_lane_is_the_ordering_level_lane(ordering: str) -> None:
    """batch_delivery's settle holds back the later records of a retried record's lane()."""
    w: Window[Rec] = Window(ordering, 10)
    a, null = Rec(7, b"a"), Rec(8, None)
    expected = {"key": (b"a", 8), "partition": (w.lane(null), w.lane(a)), "none": (7, 8)}[ordering]
    assert (w.lane(a), w.lane(null)) == expected
    w.add(a)
    w.take()
    assert (w.lane(a), w.lane(null)) == expected  # the same whatever the window holds


# --- random operations against a reference ----------------------------------------------------


def third(r: Rec) -> int:
    """A looser raw bound than ``size`` itself: size(r) <= 3 * third(r) + 128 still holds."""
    return r.size // 3


RAW_SIZES: list[Callable[[Rec], int] | None] = [None, size, third]


@pytest.mark.parametrize("seed", range(60))
def test_window_agrees_with_the_model_on_random_operations(seed: int) -> None:
    """The window gives what a naive model of its rules gives (tests/support/window_model.py:
    lists, one record at a time, exact sizes): the same records of every take / take_batch / clear, the
    same lanes and counts, through random adds (one by one or bulk), takes (with or without the
    raw-size bound, limits by records, bytes and max_in_flight), finishes (one by one or bulk, of
    in-flight, pending, finished and unknown offsets, in any order) and reconfigures between all
    three orderings with records in flight."""
    rng = random.Random(seed)
    ordering, limit = ORDERINGS[seed % 3], rng.choice([1, 3, 8, 40])
    new: Window[Rec] = Window(ordering, limit)
    ref: ModelWindow[Rec] = ModelWindow(ordering, limit)
    keys = rng.choice([[b"a"], [b"a", b"b", None], [b"a", b"b", b"c", b"d", b"e", None], [None]])
    added: list[Rec] = []
    in_flight: list[Rec] = []
    for _ in range(400):
        op = rng.random()
        if op < 0.25:
            chunk = [
                Rec(len(added) + i, rng.choice(keys), rng.choice([rng.randrange(1, 60), 500]))
                for i in range(rng.randrange(1, 30))
            ]
            added += chunk
            for w in (new, ref):
                if rng.random() < 0.5:
                    w.add_many(chunk)
                else:
                    for r in chunk:
                        w.add(r)
        elif op < 0.35:
            out = new.take()
            assert out == ref.take()
            in_flight += out
        elif op < 0.6:
            args = (rng.choice([1, 2, 5, 100]), rng.choice([15, 60, 300, 100_000]), size, rng.choice(RAW_SIZES))
            out = new.take_batch(*args)
            assert out == ref.take_batch(*args)
            in_flight += out
        elif op < 0.72 and added:
            r = rng.choice(in_flight) if in_flight and rng.random() < 0.8 else rng.choice([*added, Rec(-1, None)])
            if r in in_flight:
                in_flight.remove(r)
            new.finish(r)
            ref.finish(r)
        elif op < 0.9 and added:
            done = rng.sample(in_flight, rng.randrange(0, len(in_flight) + 1))
            if rng.random() < 0.5:
                done.sort(key=lambda r: r.offset)  # as acknowledged_many passes them
            in_flight = [r for r in in_flight if r not in done]
            # and offsets not in flight: never taken, pending, finished, or unknown
            other = rng.choice(added)
            extra = rng.choice([[], [-1], [] if other in in_flight else [other.offset]])
            offsets_done = [r.offset for r in done] + extra
            new.finish_offsets(offsets_done)
            ref.finish_offsets(iter(offsets_done))
        elif op < 0.97:
            ordering, limit = rng.choice(ORDERINGS), rng.choice([1, 3, 8, 40])
            new.reconfigure(ordering, limit)
            ref.reconfigure(ordering, limit)
        else:
            assert new.clear() == ref.clear()
        assert (new.in_flight, new.pending) == (ref.in_flight, ref.pending) == (len(in_flight), new.pending)
        if added:
            r = rng.choice(added)
            assert new.lane(r) == ref.lane(r)
    assert new.clear() == ref.clear()


@pytest.mark.parametrize("seed", range(20))
def test_none_is_a_fifo_bounded_by_max_in_flight(seed: int) -> None:
    """``none`` against a plain model: waiting records go in offset order, as many as the records,
    bytes (exact sizes; the first record always) and in-flight limits allow, whatever is in flight."""
    rng = random.Random(seed)
    limit = rng.choice([1, 5, 50])
    w: Window[Rec] = Window("none", limit)
    waiting: list[Rec] = []
    in_flight: list[Rec] = []
    offset = 0
    for _ in range(300):
        op = rng.random()
        if op < 0.3:
            n = rng.randrange(1, 40)
            chunk = [Rec(offset + i, rng.choice([b"a", None]), rng.randrange(1, 80)) for i in range(n)]
            offset += len(chunk)
            w.add_many(chunk)
            waiting += chunk
        elif op < 0.65:
            max_records, max_bytes = rng.choice([1, 7, 100]), rng.choice([50, 400, 100_000])
            expected: list[Rec] = []
            used = 0
            for r in waiting[: max(0, min(max_records, limit - len(in_flight)))]:
                if expected and used + r.size > max_bytes:
                    break
                expected.append(r)
                used += r.size
            assert w.take_batch(max_records, max_bytes, size, rng.choice(RAW_SIZES)) == expected
            del waiting[: len(expected)]
            in_flight += expected
        elif op < 0.75:
            expected = waiting[: max(0, limit - len(in_flight))]
            assert w.take() == expected
            del waiting[: len(expected)]
            in_flight += expected
        else:
            done = rng.sample(in_flight, rng.randrange(0, len(in_flight) + 1))
            in_flight = [r for r in in_flight if r not in done]
            w.finish_offsets([r.offset for r in done] + [offset + 1000])  # and one never taken
        assert (w.in_flight, w.pending) == (len(in_flight), len(waiting))
    assert w.clear() == waiting


@pytest.mark.parametrize(
    ("limit", "dues", "now", "taken", "held"),
    [
        (10, [100, 200, 300], 250, [0, 1], 300),  # the due ones start; the next due is told
        (10, [100, 200], 500, [0, 1], None),  # all due: nothing held
        (1, [100, 200], 500, [0], None),  # the in-flight bound wins; no timer needed for it
        (10, [400, 100], 250, [], 400),  # the head decides: nothing overtakes it
        (10, [], 250, [], None),
    ],
)
def test_take_due_starts_only_what_is_due_in_offset_order(
    limit: int, dues: list[int], now: int, taken: list[int], held: int | None
) -> None:
    w: Window[Rec] = Window("none", limit)
    w.add_many([Rec(i, b"k") for i in range(len(dues))])
    out, next_due = w.take_due(lambda r: dues[r.offset], now)
    assert [r.offset for r in out] == taken and next_due == held
    assert w.in_flight == len(taken) and w.pending == len(dues) - len(taken)
