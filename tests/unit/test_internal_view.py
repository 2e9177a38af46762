"""The portal's cluster-wide view of the delay store and the back-checks, from workers' stats."""

from __future__ import annotations

from ferry.internal import DELAY, TXN
from ferry.portal.internal_view import delays, transactions


def worker(
    lags: list[int | None], next_due: int | None, p99: float | None, prepared: list[dict] | None = None, **counters: int
) -> dict:  # type: ignore[type-arg]
    return {
        "partitions": [{"subscription": DELAY, "topic": "d", "partition": i, "lag": lag} for i, lag in enumerate(lags)]
        + [
            {"subscription": "orders", "topic": "o", "partition": 0, "lag": 1000},
            {"subscription": TXN, "topic": "t", "partition": 0, "lag": 5},
        ],
        "internal": {
            "delay": {"next_due": next_due, "late_p99_ms": p99},
            "txn": {"prepared": prepared or [], "oldest_prepared_age_s": 0.0, **counters},
        },
    }


def test_delays_add_up_over_workers_and_ignore_other_work() -> None:
    assert delays({}) == {"scheduled": 0, "next_due": None, "late_p99_ms": None}
    docs = {"w1": worker([3, None, 4], 2_000, 12.0), "w2": worker([10], 1_500, 3.5), "w3": {"partitions": []}}
    assert delays(docs) == {"scheduled": 17, "next_due": 1_500, "late_p99_ms": 12.0}
    assert delays({"w1": worker([1], None, None)}) == {"scheduled": 1, "next_due": None, "late_p99_ms": None}


def test_transactions_oldest_first_with_their_worker_and_summed_counters() -> None:
    a = {"id": "0.1.a", "created_ms": 5_000, "timeout_ms": 1000, "checks": 2}
    b = {"id": "1.7.b", "created_ms": 1_000, "timeout_ms": 1000, "checks": 0}
    docs = {
        "w1": worker([], None, None, [a], checks=3, committed=1),
        "w2": worker([], None, None, [b], checks=1, rolled_back=2),
    }
    view = transactions(docs, now_ms=11_000)
    assert [(t["id"], t["worker"], t["age_s"], t["state"]) for t in view["transactions"]] == [
        ("1.7.b", "w2", 10.0, "prepared"),
        ("0.1.a", "w1", 6.0, "prepared"),
    ]
    assert view["counters"] == {
        "checks": 4,
        "check_failures": 0,
        "committed": 1,
        "rolled_back": 2,
        "oldest_prepared_age_s": 0.0,
    }
