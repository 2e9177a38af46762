"""What the portal shows of Ferry's own work, folded from the workers' published stats (pure).

Use case: ``GET /api/v1/delays`` (docs/contract.md §10) and ``GET /api/v1/transactions``
(docs/transactions.md) answer for the whole cluster; each worker publishes the figures of the
internal partitions it owns (``ferry.worker.sinks``), and these functions add them up. Table
tests: tests/unit/test_internal_view.py.
"""

from __future__ import annotations

from typing import Any

from ferry.internal import DELAY


def delays(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"scheduled", "next_due", "late_p99_ms"}``: records waiting in the delay topics (not yet
    moved on), the earliest due time of the records the workers hold, and the worst p99 lateness."""
    scheduled = 0
    next_due: int | None = None
    late: float | None = None
    for doc in docs.values():
        for p in doc.get("partitions", []):
            if p.get("subscription") == DELAY and isinstance(p.get("lag"), int):
                scheduled += p["lag"]
        d = (doc.get("internal") or {}).get("delay") or {}
        if isinstance(d.get("next_due"), int):
            next_due = d["next_due"] if next_due is None else min(next_due, d["next_due"])
        if isinstance(d.get("late_p99_ms"), int | float):
            late = float(d["late_p99_ms"]) if late is None else max(late, float(d["late_p99_ms"]))
    return {"scheduled": scheduled, "next_due": next_due, "late_p99_ms": late}


def transactions(docs: dict[str, dict[str, Any]], now_ms: int) -> dict[str, Any]:
    """The prepared transactions the back-check owners hold (oldest first, at most 100 per worker),
    and the cluster's counters since the workers started."""
    listed: list[dict[str, Any]] = []
    totals = {"checks": 0, "check_failures": 0, "committed": 0, "rolled_back": 0}
    oldest = 0.0
    for wid, doc in sorted(docs.items()):
        t = (doc.get("internal") or {}).get("txn") or {}
        for item in t.get("prepared", []):
            listed.append({**item, "state": "prepared", "worker": wid, "age_s": (now_ms - item["created_ms"]) / 1000})
        for k in totals:
            totals[k] += int(t.get(k, 0) or 0)
        oldest = max(oldest, float(t.get("oldest_prepared_age_s", 0.0) or 0.0))
    listed.sort(key=lambda x: x["created_ms"])
    return {"transactions": listed, "counters": {**totals, "oldest_prepared_age_s": oldest}}
