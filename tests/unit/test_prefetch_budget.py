"""The worker-wide prefetch budgets (bytes and records) shared among the partitions a worker owns."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ferry import config
from ferry.errors import ConfigError
from ferry.worker.backpressure import CONSUME_MAX, HOLD_AT, consume_batch
from ferry.worker.engine import (
    MIN_PREFETCH_BYTES,
    MIN_PREFETCH_RECORDS,
    Engine,
    prefetch_bytes_per_partition,
    prefetch_records_per_partition,
)

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("per_partition", "budget", "owned", "expect"),
    [
        (16 * MIB, 128 * MIB, 0, 16 * MIB),  # nothing owned yet
        (16 * MIB, 128 * MIB, 8, 16 * MIB),  # few partitions: the per-partition setting decides
        (16 * MIB, 128 * MIB, 12, 128 * MIB // 12),
        (16 * MIB, 128 * MIB, 1000, 128 * MIB // 1000),  # many: an even share of the budget
        (16 * MIB, 128 * MIB, 100_000, MIN_PREFETCH_BYTES),  # never below one fetch's worth
        (32 * 1024, 128 * MIB, 1, MIN_PREFETCH_BYTES),
    ],
)
def test_share(per_partition: int, budget: int, owned: int, expect: int) -> None:
    assert prefetch_bytes_per_partition(per_partition, budget, owned) == expect


def test_setting() -> None:
    assert config.load(env={}).worker.prefetch_budget_bytes == 128 * MIB
    assert config.load(env={"FERRY_PREFETCH_BUDGET_BYTES": "1048576"}).worker.prefetch_budget_bytes == MIB
    with pytest.raises(ConfigError, match="FERRY_PREFETCH_BUDGET_BYTES"):
        config.load(env={"FERRY_PREFETCH_BUDGET_BYTES": "0"})


@pytest.mark.parametrize(
    ("per_partition", "budget", "owned", "expect"),
    [
        (20_000, 240_000, 0, 20_000),  # nothing owned yet
        (20_000, 240_000, 12, 20_000),  # few partitions: each fetches as deep as the setting allows
        (20_000, 240_000, 24, 10_000),
        (20_000, 240_000, 1000, 240),  # many: an even share of the budget
        (20_000, 240_000, 100_000, MIN_PREFETCH_RECORDS),  # never below a useful batch
        (50, 240_000, 1000, 50),  # a per-partition setting below the floor is kept
        (50, 240_000, 100_000, 50),
    ],
)
def test_record_share(per_partition: int, budget: int, owned: int, expect: int) -> None:
    assert prefetch_records_per_partition(per_partition, budget, owned) == expect


@pytest.mark.parametrize("owned", [1, 12, 100, 1000, 5000])
def test_record_share_leaves_room_for_a_batch(owned: int) -> None:
    """A batch taken while a partition holds still fits under its bound."""
    bound = prefetch_records_per_partition(20_000, 240_000, owned)
    batch = consume_batch(bound)
    assert 1 <= batch <= CONSUME_MAX
    assert bound * HOLD_AT + batch <= bound


def test_record_settings() -> None:
    worker = config.load(env={}).worker
    assert (worker.prefetch_records, worker.prefetch_budget_records) == (20_000, 240_000)
    loaded = config.load(env={"FERRY_PREFETCH_BUDGET_RECORDS": "5000"}).worker
    assert loaded.prefetch_budget_records == 5000
    with pytest.raises(ConfigError, match="FERRY_PREFETCH_BUDGET_RECORDS"):
        config.load(env={"FERRY_PREFETCH_BUDGET_RECORDS": "0"})


@pytest.mark.parametrize(("setting", "expect"), [("40", 40), ("100000", 7500)])
def test_the_engine_gives_its_fetchers_the_batch_setting(setting: str, expect: int) -> None:
    """``FERRY_FETCH_BATCH_RECORDS`` reaches every fetcher, below the room of a partition's bound
    (one owned partition: the 20,000-record setting, 3/8 of it 7,500)."""
    engine = Engine(config.load(env={"FERRY_FETCH_BATCH_RECORDS": setting}), "w-batch")
    fetchers = [SimpleNamespace(batch_size=0), SimpleNamespace(batch_size=0)]
    engine._clusters["default"] = SimpleNamespace(fetchers=fetchers[:1], internal_fetchers=fetchers[1:])  # type: ignore[assignment]
    engine._ctx = SimpleNamespace(prefetch_records=0, prefetch_bytes=0)  # type: ignore[assignment]  # set by start()
    engine.expect(1)
    engine._owned_changed()
    assert [f.batch_size for f in fetchers] == [expect, expect]
