"""Where a gateway prepares (TxnLog._prepare_partition, FERRY_TXN_STICKY_MS): one partition for
``sticky_ms``, then another at random, so that every partition gets its share over time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from ferry.txnlog import TxnLog


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


@contextlib.contextmanager
def opened(sticky_ms: int, clock: list[float]) -> Iterator[TxnLog]:
    log = TxnLog({"bootstrap.servers": "127.0.0.1:9"}, sticky_ms=sticky_ms, clock=lambda: clock[0])
    try:
        yield log
    finally:
        log.close()


def test_prepares_stay_in_one_partition_for_sticky_ms_then_spread(clock: list[float]) -> None:
    with opened(100, clock) as log:
        assert len({log._prepare_partition(9) for _ in range(500)}) == 1  # no time passed
        clock[0] += 0.099
        assert len({log._prepare_partition(9) for _ in range(500)}) == 1  # still within 100 ms
        seen = []
        for _ in range(900):
            clock[0] += 0.1
            seen.append(log._prepare_partition(9))
        assert set(seen) == set(range(9))
        assert min(seen.count(p) for p in range(9)) > 50  # about 100 each


def test_zero_picks_a_partition_for_every_prepare(clock: list[float]) -> None:
    with opened(0, clock) as log:
        assert set(log._prepare_partition(9) for _ in range(500)) == set(range(9))


def test_a_log_with_fewer_partitions_than_the_one_stuck_to_moves_at_once(clock: list[float]) -> None:
    with opened(60_000, clock) as log:
        while log._prepare_partition(9) < 4:  # stuck on a partition beyond 4
            clock[0] += 61
        assert all(log._prepare_partition(4) < 4 for _ in range(100))
