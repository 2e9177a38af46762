"""A partition's fetch gate as its buffer fills and drains (worker.backpressure.next_gate)."""

from __future__ import annotations

import pytest

from ferry import config
from ferry.errors import ConfigError
from ferry.worker.backpressure import CONSUME_MAX, Gate, consume_batch, next_gate

OPEN, HELD, PAUSED = Gate.OPEN, Gate.HELD, Gate.PAUSED
MAX_RECORDS, MAX_BYTES = 2000, 1_000_000


@pytest.mark.parametrize(
    ("gate", "records", "size", "expected"),
    [
        # open: stays open until 5/8 of either bound
        (OPEN, 0, 0, OPEN),
        (OPEN, 1249, 0, OPEN),
        (OPEN, 1250, 0, HELD),
        (OPEN, 10, 624_999, OPEN),
        (OPEN, 10, 625_000, HELD),
        # a whole batch may cross both thresholds at once
        (OPEN, 2000, 0, PAUSED),
        (OPEN, 10, 1_000_000, PAUSED),
        # held: paused at a bound, open again at half the records
        (HELD, 1999, 999_999, HELD),
        (HELD, 2000, 0, PAUSED),
        (HELD, 5, 1_000_000, PAUSED),
        (HELD, 1001, 0, HELD),
        (HELD, 1000, 0, OPEN),
        (HELD, 0, 0, OPEN),
        # paused: stays paused until half the records and under the byte bound
        (PAUSED, 1999, 0, PAUSED),
        (PAUSED, 1001, 0, PAUSED),
        (PAUSED, 1000, 0, OPEN),
        (PAUSED, 1000, 999_999, OPEN),  # open; the next change holds it again (bytes ≥ 5/8)
        (PAUSED, 10, 1_000_000, PAUSED),
    ],
)
def test_next_gate(gate: Gate, records: int, size: int, expected: Gate) -> None:
    assert next_gate(gate, records, size, MAX_RECORDS, MAX_BYTES) is expected


def test_a_fill_and_drain_cycle_passes_every_state_once() -> None:
    """Filling one record at a time and draining again: open → held → paused → open, each change
    once (every change is one control operation for the fetch thread)."""
    gate, changes = OPEN, []
    for records in [*range(0, 2001), *range(2000, -1, -1)]:
        new = next_gate(gate, records, records * 100, MAX_RECORDS, MAX_BYTES)
        if new is not gate:
            changes.append((records, new))
            gate = new
    assert changes == [(1250, HELD), (2000, PAUSED), (1000, OPEN)]


@pytest.mark.parametrize(
    ("max_records", "most", "batch"),
    [
        (20_000, CONSUME_MAX, 250),
        (1000, CONSUME_MAX, 250),
        (666, CONSUME_MAX, 249),
        (200, CONSUME_MAX, 75),
        (50, CONSUME_MAX, 18),
        (2, CONSUME_MAX, 1),
        (1, CONSUME_MAX, 1),
        (20_000, 1000, 1000),  # FERRY_FETCH_BATCH_RECORDS raised
        (5334, 1000, 1000),
        (2667, 1000, 1000),
        (2000, 1000, 750),
        (1334, 1000, 500),
        (20_000, 1, 1),
    ],
)
def test_a_consumed_batch_fits_between_the_hold_and_the_bound(max_records: int, most: int, batch: int) -> None:
    assert consume_batch(max_records, most) == batch
    # A partition just under its hold level that receives the whole batch stays under its bound.
    hold_level = -(-max_records * 5 // 8) - 1  # the most records that do not hold yet
    if max_records > 2:
        assert next_gate(Gate.OPEN, hold_level + batch, 0, max_records, 1 << 40) is not Gate.PAUSED


def test_the_batch_setting_defaults_to_the_fetchers_default() -> None:
    assert config.load(env={}).worker.fetch_batch_records == CONSUME_MAX
    assert config.load(env={"FERRY_FETCH_BATCH_RECORDS": "1000"}).worker.fetch_batch_records == 1000
    with pytest.raises(ConfigError, match="FERRY_FETCH_BATCH_RECORDS"):
        config.load(env={"FERRY_FETCH_BATCH_RECORDS": "0"})
