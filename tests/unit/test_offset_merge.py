"""Offset merge as a ledger: acks in, watermark and acked ranges out."""

from __future__ import annotations

import random

import pytest

from ferry.worker import offset_merge
from ferry.worker.offset_merge import OffsetMerge


@pytest.mark.parametrize(
    ("start", "acks", "committed", "acked"),
    [
        (0, [], 0, ()),
        (0, [0, 1, 2], 3, ()),  # in order
        (0, [2, 1, 0], 3, ()),  # reversed: closes at the end
        (0, [1, 2, 4], 0, ((1, 3), (4, 5))),  # gaps at 0 and 3
        (0, [1, 2, 4, 0], 3, ((4, 5),)),  # first gap filled
        (0, [1, 2, 4, 0, 3], 5, ()),  # all filled
        (10, [5, 9], 10, ()),  # below the watermark: already done
        (0, [3, 3, 3], 0, ((3, 4),)),  # duplicate acks
        (0, [5, 3, 4], 0, ((3, 6),)),  # ranges merge when they touch
        (0, [2, 6, 4, 3, 5], 0, ((2, 7),)),
        (100, [100, 102, 101, 104], 103, ((104, 105),)),
    ],
)
def test_ledger(start: int, acks: list[int], committed: int, acked: tuple[tuple[int, int], ...]) -> None:
    m = OffsetMerge(start)
    for a in acks:
        m.ack(a)
    assert (m.committed, m.acked) == (committed, acked)
    assert m.gaps == len(acked)


@pytest.mark.parametrize(
    ("start", "ranges", "committed", "acked"),
    [
        (0, [(0, 5)], 5, ()),
        (0, [(3, 5), (7, 9)], 0, ((3, 5), (7, 9))),
        (0, [(3, 5), (7, 9), (4, 8)], 0, ((3, 9),)),
        (0, [(3, 5), (0, 3)], 5, ()),
        (5, [(0, 7)], 7, ()),  # straddles the watermark
        (0, [(5, 5)], 0, ()),  # empty range
        (0, [(2, 3), (4, 5), (6, 7), (1, 8)], 0, ((1, 8),)),  # one range swallows several
    ],
)
def test_ranges(start: int, ranges: list[tuple[int, int]], committed: int, acked: tuple[tuple[int, int], ...]) -> None:
    m = OffsetMerge(start)
    for lo, hi in ranges:
        m.ack_range(lo, hi)
    assert (m.committed, m.acked) == (committed, acked)


def test_restore_and_skip() -> None:
    m = OffsetMerge(1200, ((1203, 1210), (1212, 1213)))
    assert (m.committed, m.acked) == (1200, ((1203, 1210), (1212, 1213)))
    assert [m.is_acked(o) for o in (1199, 1200, 1203, 1209, 1210, 1212, 1213)] == [
        True, False, True, True, False, True, False,
    ]  # fmt: skip
    assert [m.skip_to(o) for o in (0, 1200, 1203, 1205, 1210, 1212)] == [1200, 1200, 1210, 1210, 1210, 1213]
    assert m.acked_above == 8


def test_state_size_follows_gaps_not_window() -> None:
    m = OffsetMerge(0)
    for o in range(1, 100_000):  # offset 0 missing: one gap, whatever the window
        m.ack(o)
    assert m.acked == ((1, 100_000),)
    m.ack(0)
    assert (m.committed, m.acked) == (100_000, ())


def test_random_orders_agree_with_a_set() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randrange(1, 60)
        order = list(range(n))
        rng.shuffle(order)
        cut = rng.randrange(0, n + 1)
        m = OffsetMerge(0)
        for o in order[:cut]:
            m.ack(o)
        done = set(order[:cut])
        expect = 0
        while expect in done:
            expect += 1
        assert m.committed == expect
        assert all(m.is_acked(o) == (o in done) for o in range(n + 2))
        for lo, hi in m.acked:
            assert lo > m.committed and all(o in done for o in range(lo, hi))


def _as_ranges(done: set[int], committed: int) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for o in sorted(x for x in done if x > committed):
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return tuple(out)


@pytest.mark.parametrize("seed", range(6))
def test_mixed_acks_and_ranges_agree_with_a_set(seed: int) -> None:
    """Single acks, range acks (log holes) and reads of the state interleaved at random: the merge
    always equals the plain set of acknowledged offsets, in normal form."""
    rng = random.Random(seed)
    n = 3000
    m = OffsetMerge(0)
    done: set[int] = set()
    order = list(range(n))
    rng.shuffle(order)
    for o in order:
        roll = rng.random()
        if roll < 0.05:
            lo = rng.randrange(0, n)
            hi = lo + rng.randrange(0, 20)
            m.ack_range(lo, hi)
            done.update(range(lo, hi))
        m.ack(o)
        done.add(o)
        if roll > 0.98:
            expect = 0
            while expect in done:
                expect += 1
            assert m.committed == expect
            assert m.acked == _as_ranges(done, expect)
            assert m.is_acked(o) and m.skip_to(expect) == expect
    assert (m.committed, m.acked) == (max(done) + 1, ())


@pytest.mark.parametrize(
    ("start", "batches", "committed", "acked"),
    [
        (0, [[0, 1, 2]], 3, ()),  # contiguous at the watermark: one step
        (0, [[1, 2], [0]], 3, ()),
        (0, [[2, 5, 9], [0, 1]], 3, ((5, 6), (9, 10))),  # sparse (a key-ordered batch)
        (10, [[3, 9, 10, 12]], 11, ((12, 13),)),  # offsets below the watermark are ignored
        (0, [[4, 5, 6], [0, 1, 2, 3]], 7, ()),  # contiguous below a range: walks through it
        (0, [[1], [1, 2], [0]], 3, ()),  # a repeat across batches
    ],
)
def test_ack_many(start: int, batches: list[list[int]], committed: int, acked: tuple[tuple[int, int], ...]) -> None:
    m = OffsetMerge(start)
    for b in batches:
        m.ack_many(b)
    assert (m.committed, m.acked) == (committed, acked)


@pytest.mark.parametrize("seed", range(4))
def test_ack_many_agrees_with_single_acks(seed: int) -> None:
    """Batches of ascending offsets (as a batch carries them) give the state single acks give,
    across folds (more than FOLD_AT acks above a stuck head)."""
    rng = random.Random(seed)
    n = 3 * offset_merge.FOLD_AT
    order = list(range(1, n))
    rng.shuffle(order)
    order.append(0)
    many, single = OffsetMerge(0), OffsetMerge(0)
    i = 0
    while i < len(order):
        batch = sorted(order[i : i + rng.randrange(1, 200)])
        i += len(batch)
        many.ack_many(batch)
        for o in batch:
            single.ack(o)
        if rng.random() < 0.1:
            assert (many.committed, many.acked) == (single.committed, single.acked)
    assert (many.committed, many.acked) == (single.committed, single.acked) == (n, ())


def test_stuck_head_stays_one_range() -> None:
    """The head record is in retries while far more than FOLD_AT records above it are acked:
    memory and the state stay one range, and the head's ack releases all of it at once."""
    m = OffsetMerge(0)
    for o in range(1, 50_001):
        m.ack(o)
    assert len(m._singles) <= offset_merge.FOLD_AT
    assert m.acked == ((1, 50_001),)
    m.ack(0)
    assert (m.committed, m.acked, m.gaps) == (50_001, (), 0)


def test_restored_ranges_are_skipped_by_the_watermark() -> None:
    m = OffsetMerge(10, ((12, 20), (25, 30)))
    m.ack(11)
    m.ack(10)
    assert (m.committed, m.acked) == (20, ((25, 30),))
    for o in range(20, 25):
        m.ack(o)
    assert (m.committed, m.acked) == (30, ())
