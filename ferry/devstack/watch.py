"""What ``ferry dev`` prints when delivery is failing: one line per failing subscription.

Use case: a newcomer's demo broke (its endpoint gone, say) and the only trace was in log files.
Every few seconds ``ferry dev`` reads each subscription's status from the portal and, for one that
is failing, prints a line like ``demo-orders: failing — 40 retries, 2 dead letters in the last 5 s;
held 12 s; see .ferry-dev/logs/worker-1.log``. :func:`summary` is the pure part (table-tested).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HELD_S = 10.0


def totals(status: Mapping[str, Any]) -> dict[str, float]:
    parts = status.get("partitions", [])
    return {
        "retried": sum(p.get("retried") or 0 for p in parts),
        "dead_lettered": sum(p.get("dead_lettered") or 0 for p in parts),
        "held": max((p.get("stalled_s") or 0 for p in parts), default=0),
    }


def summary(name: str, before: Mapping[str, float] | None, now: Mapping[str, float], every_s: float) -> str | None:
    """The line to print for one subscription, or None when it is fine."""
    if before is None:
        return None
    retries = now["retried"] - before["retried"]
    dead = now["dead_lettered"] - before["dead_lettered"]
    held = now["held"]
    if retries <= 0 and dead <= 0 and held < HELD_S:
        return None
    parts = []
    if retries > 0:
        parts.append(f"{int(retries)} retries")
    if dead > 0:
        parts.append(f"{int(dead)} dead letters")
    what = ", ".join(parts) + f" in the last {every_s:.0f} s" if parts else "no progress"
    if held >= HELD_S:
        what += f"; a record has held its partition for {held:.0f} s"
    return f"{name}: failing — {what}"
