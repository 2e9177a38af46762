"""The chaos suite's verdict rules (tests/chaos/verdict.py): lost, explained duplicates, order, stall, fencing."""

from __future__ import annotations

import pytest

from tests.chaos.report import table
from tests.chaos.verdict import UNKNOWN_OWNER, Delivery, Fault, Owned, judge


def d(p: int, o: int, at: float, ok: bool = True, key: str = "k", pusher: str | None = None) -> Delivery:
    return Delivery(p, o, key, at, ok, pusher)


@pytest.mark.parametrize(
    ("produced", "log", "dead", "lost"),
    [
        ({(0, 0), (0, 1)}, [d(0, 0, 1), d(0, 1, 2)], set(), []),
        ({(0, 0), (0, 1)}, [d(0, 0, 1)], set(), [(0, 1)]),
        ({(0, 0), (0, 1)}, [d(0, 0, 1), d(0, 1, 2, ok=False)], set(), [(0, 1)]),  # a 5xx is no delivery
        ({(0, 0), (0, 1)}, [d(0, 0, 1)], {(0, 1)}, []),  # dead-lettered counts
        ({(0, 0)}, [d(0, 0, 1), d(1, 5, 1)], set(), []),  # unconfirmed extras are not lost
    ],
)
def test_lost(produced: set[tuple[int, int]], log: list[Delivery], dead: set[tuple[int, int]], lost: list) -> None:
    assert judge(produced, log, [], dead_lettered=dead).lost == lost


@pytest.mark.parametrize(
    ("first_at", "fault", "explained"),
    [
        (10.0, Fault("kill", 10.5, 20.0, frozenset({0})), True),  # acked just before the kill (slack 2 s)
        (7.0, Fault("kill", 10.5, 20.0, frozenset({0})), False),  # long before the fault
        (15.0, Fault("kill", 10.5, 20.0, frozenset({1})), False),  # the fault touched another partition
        (15.0, Fault("net", 10.5, 20.0, None), True),  # None: every partition
        (21.0, Fault("kill", 10.5, 20.0, frozenset({0})), False),  # after recovery
        (15.0, Fault("pause", 10.5, 20.0, frozenset()), False),  # a fault that may move nothing
    ],
)
def test_duplicates_explained_by_a_fault_window(first_at: float, fault: Fault, explained: bool) -> None:
    log = [d(0, 0, first_at), d(0, 0, 30.0), d(0, 1, 31.0)]
    v = judge({(0, 0), (0, 1)}, log, [fault], slack_s=2.0)
    assert v.duplicates == 1
    assert (v.unexplained == []) is explained


@pytest.mark.parametrize(
    ("log", "violations"),
    [
        ([d(0, 0, 1), d(0, 1, 2), d(0, 0, 3), d(0, 2, 4)], 0),  # a redelivery of 0 is not a first delivery
        ([d(0, 1, 1), d(0, 0, 2)], 1),
        ([d(0, 1, 1, key="a"), d(0, 0, 2, key="b")], 0),  # different keys may interleave
        ([d(0, 1, 1), d(1, 0, 2)], 0),  # different partitions
        ([d(0, 1, 1, ok=False), d(0, 0, 2), d(0, 1, 3)], 0),  # a failed attempt is not a delivery
    ],
)
def test_order_of_first_deliveries(log: list[Delivery], violations: int) -> None:
    produced = {(x.partition, x.offset) for x in log}
    assert len(judge(produced, log, []).order_violations) == violations


def test_max_stall_is_the_longest_gap_of_one_partition() -> None:
    log = [d(0, 0, 1.0), d(1, 0, 1.5), d(0, 1, 2.0), d(1, 1, 6.5), d(0, 2, 3.0), d(0, 1, 10.0)]
    assert judge({(x.partition, x.offset) for x in log}, log, [], slack_s=0).max_stall_s == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("at", "pusher", "ok"),
    [
        (5.0, "w1", True),
        (5.0, "w2", False),  # w2 never owned partition 0
        (10.3, "w1", True),  # within the tolerance after w1's ownership ended
        (11.0, "w1", False),  # after the move: fenced
        (12.0, "w2", True),
        (25.0, "w1", True),  # owns it again
        (5.0, None, True),  # unknown pusher: not judged
    ],
)
def test_fencing(at: float, pusher: str | None, ok: bool) -> None:
    owned = [Owned(0, "w1", 0.0, 10.0), Owned(0, "w2", 11.5, 20.0), Owned(0, "w1", 20.0, None)]
    v = judge({(0, 0)}, [d(0, 0, at, pusher=pusher)], [], ownership=owned, tolerance_s=0.5)
    assert (v.fencing_violations == []) is ok


def test_report_table_shows_each_run_and_unchecked_fencing() -> None:
    rows = [
        {"scenario": "a", "records": 10, "lost": 0, "fencing_violations": 0},
        {"scenario": "b", "records": 5, "lost": 0, "fencing_violations": None},
        {"scenario": "a", "records": 12, "lost": 0, "fencing_violations": 0},
    ]
    lines = table(rows).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| a | 10 / 12 |")
    assert "| n/a |" in lines[3]


@pytest.mark.parametrize(
    ("at", "pusher", "ok"),
    [
        (11.0, "w3", True),  # inside the window the timeline could not see: not judged
        (15.0, "w3", False),  # w2's ownership was seen: w3 pushing then is a violation
    ],
)
def test_fencing_where_the_timeline_missed_owners(at: float, pusher: str, ok: bool) -> None:
    owned = [Owned(0, "w1", 0.0, 10.0), Owned(0, UNKNOWN_OWNER, 10.0, 12.0), Owned(0, "w2", 12.0, None)]
    v = judge({(0, 0)}, [d(0, 0, at, pusher=pusher)], [], ownership=owned, tolerance_s=0.5)
    assert (v.fencing_violations == []) is ok
