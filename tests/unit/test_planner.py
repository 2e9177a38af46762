"""Assignment planner: balance, stickiness and minimal movement, as tables."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from ferry.coordinator.planner import moves, plan


def parts(n: int) -> dict[tuple[str, str, int], float]:
    return {("s", "t", i): 1.0 for i in range(n)}


def counts(assignment: dict, workers: list[str]) -> list[int]:  # type: ignore[type-arg]
    c = Counter(assignment.values())
    return [c[w] for w in workers]


@pytest.mark.parametrize(
    ("n_parts", "workers", "expect"),
    [
        (0, ["a"], [0]),
        (1, ["a", "b"], [1, 0]),
        (24, ["a", "b", "c"], [8, 8, 8]),
        (10, ["a", "b", "c"], [4, 3, 3]),
        (5, ["a", "b", "c", "d", "e", "f", "g"], [1, 1, 1, 1, 1, 0, 0]),
    ],
)
def test_fresh_plan_is_balanced(n_parts: int, workers: list[str], expect: list[int]) -> None:
    got = plan(dict.fromkeys(workers, 1.0), parts(n_parts), {})
    assert sorted(counts(got, workers), reverse=True) == expect
    assert plan(dict.fromkeys(workers, 1.0), parts(n_parts), {}) == got  # deterministic


def test_no_workers_no_assignment() -> None:
    assert plan({}, parts(3), {}) == {}


@pytest.mark.parametrize(
    ("n_parts", "before", "after", "max_moves"),
    [
        (24, ["a", "b", "c"], ["a", "b", "c", "d"], 6),  # a fourth worker takes exactly its share
        (24, ["a", "b", "c", "d"], ["a", "b", "c"], 6),  # one leaves: only its partitions move
        (24, ["a", "b", "c"], ["a", "b", "c"], 0),  # nothing changed: nothing moves
        (100, ["a", "b"], ["a", "b", "c", "d"], 50),
    ],
)
def test_minimal_movement(n_parts: int, before: list[str], after: list[str], max_moves: int) -> None:
    p = parts(n_parts)
    first = plan(dict.fromkeys(before, 1.0), p, {})
    second = plan(dict.fromkeys(after, 1.0), p, first)
    moved = moves(first, second)
    assert len(moved) == max_moves
    c = counts(second, after)
    assert max(c) - min(c) <= 1
    # Workers that stayed only ever give partitions away; nothing moves between them.
    for q in moved:
        assert first[q] not in after or second[q] not in before


def test_new_partitions_go_to_the_least_loaded() -> None:
    first = plan({"a": 1.0, "b": 1.0}, parts(4), {})
    more = parts(6)
    second = plan({"a": 1.0, "b": 1.0}, more, first)
    assert moves(first, second) == []
    assert counts(second, ["a", "b"]) == [3, 3]


def test_capacity_weights() -> None:
    got = plan({"big": 3.0, "small": 1.0}, parts(40), {})
    assert counts(got, ["big", "small"]) == [30, 10]


def test_partition_weights() -> None:
    p = {("s", "t", 0): 10.0, **{("s", "t", i): 1.0 for i in range(1, 11)}}
    got = plan({"a": 1.0, "b": 1.0}, p, {})
    load = Counter()  # type: ignore[var-annotated]
    for q, w in got.items():
        load[w] += p[q]
    assert sorted(load.values()) == [10.0, 10.0]


def test_dropped_partitions_and_dead_workers() -> None:
    first = plan({"a": 1.0, "b": 1.0}, parts(6), {})
    second = plan({"a": 1.0}, parts(3), first)
    assert set(second) == set(parts(3)) and set(second.values()) == {"a"}


def test_random_churn_stays_balanced_and_sticky() -> None:
    rng = random.Random(3)
    workers = [f"w{i}" for i in range(5)]
    current = plan(dict.fromkeys(workers, 1.0), parts(97), {})
    for _ in range(50):
        if rng.random() < 0.5 and len(workers) > 1:
            workers.remove(rng.choice(workers))
        else:
            workers.append(f"w{rng.randrange(1000)}")
        workers = sorted(set(workers))
        nxt = plan(dict.fromkeys(workers, 1.0), parts(97), current)
        c = counts(nxt, workers)
        assert max(c) - min(c) <= 1
        # Never more moves than the orphans plus what balance strictly needs.
        orphaned = sum(1 for q, w in current.items() if w not in workers)
        floor = 97 // len(workers)
        surplus = sum(max(0, n - (floor + 1)) for n in Counter(w for w in current.values() if w in workers).values())
        assert len(moves(current, nxt)) <= orphaned + surplus + len(workers)
        current = nxt
