"""Zone-aware planning (coordinator.planner.plan_zones): zone preference, failover, failback,
balance within a zone and minimal movement, as tables."""

from __future__ import annotations

from collections import Counter

import pytest

from ferry.coordinator.planner import moves, plan, plan_zones

Part = tuple[str, str, int]


def cluster_parts(cluster: str, n: int) -> dict[Part, float]:
    return {(cluster, "t", i): 1.0 for i in range(n)}


PARTS = {**cluster_parts("default", 12), **cluster_parts("dc2", 12)}
HOME = {p: ("dc1" if p[0] == "default" else "dc2") for p in PARTS}


def ws(*spec: str) -> dict[str, tuple[str, float]]:
    """'a@dc1' → worker a in zone dc1."""
    return {s.split("@")[0]: (s.split("@")[1], 1.0) for s in spec}


def zone_of(workers: dict[str, tuple[str, float]], w: str) -> str:
    return workers[w][0]


TWO_ZONES = ws("a@dc1", "b@dc1", "c@dc2", "d@dc2")


def test_each_zone_pushes_its_own_partitions_balanced() -> None:
    got = plan_zones(TWO_ZONES, PARTS, HOME, {})
    assert all(zone_of(TWO_ZONES, w) == HOME[p] for p, w in got.items())
    assert sorted(Counter(got.values()).values()) == [6, 6, 6, 6]


def test_without_zones_it_is_the_plain_plan() -> None:
    workers = ws("a@", "b@", "c@")
    assert plan_zones(workers, PARTS, {}, {}) == plan(dict.fromkeys("abc", 1.0), PARTS, {})


# Each case: workers before, workers after; expected: zone of every partition after, how many move,
# and the spread of partitions per worker after.
CASES: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, str] | None, int, tuple[int, int]]] = {
    "failover: dc2 has no live worker, its partitions spread over dc1": (
        ("a@dc1", "b@dc1", "c@dc2", "d@dc2"),
        ("a@dc1", "b@dc1"),
        {"default": "dc1", "dc2": "dc1"},
        12,  # exactly dc2's partitions, whose workers died; dc1's own stay put
        (12, 12),
    ),
    "failback: dc2 returns, only dc2's partitions move, all home": (
        ("a@dc1", "b@dc1"),
        ("a@dc1", "b@dc1", "c@dc2", "d@dc2"),
        {"default": "dc1", "dc2": "dc2"},
        12,
        (6, 6),
    ),
    "one dc2 worker of two leaves: dc2 keeps its partitions": (
        ("a@dc1", "b@dc1", "c@dc2", "d@dc2"),
        ("a@dc1", "b@dc1", "c@dc2"),
        {"default": "dc1", "dc2": "dc2"},
        6,  # the leaver's partitions, to the other dc2 worker
        (6, 12),
    ),
    "a worker joins dc1: it takes its share of dc1 only": (
        ("a@dc1", "b@dc1", "c@dc2", "d@dc2"),
        ("a@dc1", "b@dc1", "e@dc1", "c@dc2", "d@dc2"),
        {"default": "dc1", "dc2": "dc2"},
        4,
        (4, 6),
    ),
    "nothing changes: nothing moves": (
        ("a@dc1", "b@dc1", "c@dc2", "d@dc2"),
        ("a@dc1", "b@dc1", "c@dc2", "d@dc2"),
        {"default": "dc1", "dc2": "dc2"},
        0,
        (6, 6),
    ),
    "failover onto a zone of different size stays balanced": (
        ("a@dc1", "b@dc1", "e@dc3", "c@dc2", "d@dc2"),
        ("a@dc1", "b@dc1", "e@dc3"),
        {"default": "dc1", "dc2": None},  # type: ignore[dict-item]
        12,
        (8, 8),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_zone_changes(name: str) -> None:
    before_spec, after_spec, zones, n_moves, spread = CASES[name]
    before_w, after_w = ws(*before_spec), ws(*after_spec)
    first = plan_zones(before_w, PARTS, HOME, {})
    second = plan_zones(after_w, PARTS, HOME, first)
    assert set(second) == set(PARTS)
    for p, w in second.items():
        assert w in after_w
        want = zones[p[0]] if zones else None
        if want is not None:
            assert zone_of(after_w, w) == want, (p, w)
    assert len(moves(first, second)) == n_moves
    per_worker = Counter(second.values())
    assert (min(per_worker.values()), max(per_worker.values())) == spread
    # A partition moves only away from a worker that left, or back to its home zone.
    for p in moves(first, second):
        assert first[p] not in after_w or zone_of(after_w, second[p]) == HOME[p], p
    # Planning again with nothing changed moves nothing.
    assert moves(second, plan_zones(after_w, PARTS, HOME, second)) == []


def test_failover_then_failback_returns_every_partition_home() -> None:
    full = ws("a@dc1", "b@dc1", "c@dc2", "d@dc2")
    start = plan_zones(full, PARTS, HOME, {})
    failed = plan_zones(ws("a@dc1", "b@dc1"), PARTS, HOME, start)
    back = plan_zones(full, PARTS, HOME, failed)
    assert all(zone_of(full, w) == HOME[p] for p, w in back.items())
    # dc1's own partitions never moved through the whole episode.
    for p in PARTS:
        if HOME[p] == "dc1":
            assert start[p] == failed[p] == back[p]


def test_base_load_balances_on_top_of_existing_work() -> None:
    got = plan({"a": 1.0, "b": 1.0}, {("x", "t", i): 1.0 for i in range(6)}, {}, base_load={"a": 4.0})
    assert Counter(got.values()) == {"b": 5, "a": 1}
