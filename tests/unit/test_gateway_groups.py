"""Table tests of gateway/producer.py's :func:`groups`: which of a request's records are queued in
one ``produce_batch`` call, and which alone."""

from __future__ import annotations

import pytest

from ferry.gateway.producer import groups
from ferry.gateway.records import Outgoing

RUN_MAX = 1000


def item(
    topic: str = "a", *, headers: bool = False, partition: int | None = None, size: int = 100
) -> tuple[Outgoing, str, int]:
    rec = Outgoing(topic, b"k", b"v", [("h", b"1")] if headers else [], partition)
    return rec, topic, size


@pytest.mark.parametrize(
    ("items", "ranges"),
    [
        ([item()], [(0, 1)]),  # a one-record request: alone
        ([item(), item(), item()], [(0, 3)]),
        ([item("a"), item("a"), item("b"), item("b")], [(0, 2), (2, 4)]),  # a run is one topic
        ([item(), item(headers=True), item(), item()], [(0, 1), (1, 2), (2, 4)]),
        ([item(partition=0), item(), item()], [(0, 1), (1, 3)]),
        ([item(), item(), item(partition=2)], [(0, 2), (2, 3)]),
        ([item(), item(size=RUN_MAX + 1), item()], [(0, 1), (1, 2), (2, 3)]),  # may be refused: alone
        ([item(size=RUN_MAX), item(size=RUN_MAX)], [(0, 2)]),
        ([item(headers=True), item(headers=True)], [(0, 1), (1, 2)]),
        ([], []),
    ],
)
def test_runs_of_plain_records_and_the_rest_alone(
    items: list[tuple[Outgoing, str, int]], ranges: list[tuple[int, int]]
) -> None:
    assert list(groups(items, RUN_MAX)) == ranges
