"""The worker-wide prefetch budget shared among the partitions a worker owns."""

from __future__ import annotations

import pytest

from ferry import config
from ferry.errors import ConfigError
from ferry.worker.engine import MIN_PREFETCH_BYTES, prefetch_bytes_per_partition

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
