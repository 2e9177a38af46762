"""A short history of every subscription's delivery, and its health at a glance.

Use case: the portal's list shows, per subscription, whether it is fine, behind, failing or stuck,
and its page draws lag and throughput over the last hour — charts that survive a reload, because
the portal keeps the points, not the browser. The portal samples what the workers publish about
their partitions (``/ferry/<cluster>/stats/<worker>``: committed, high watermark, counters, the
watermark stall) every ``FERRY_PORTAL_HISTORY_INTERVAL_MS`` and feeds it to :class:`History`.

Counters are a partition owner's own (they start at 0 when a worker takes a partition over): a
rate is the counter's growth since the previous sample of the same owner. A partition that
appears after the first sample was taken over since the previous one, so all its counts are new;
in the very first sample counters only set the baseline (no spike for what a worker counted
before the portal started).

Health, from the points of the last :data:`WINDOW_S` seconds (first match wins):

- ``paused``: the subscription is paused;
- ``unknown``: no worker reports any of its partitions yet;
- ``failing``: records were dead-lettered, or retries outnumbered deliveries;
- ``stalled``: a partition's committed watermark has not moved for :data:`STALL_S` seconds while
  records wait at or above it;
- ``lagging``: more than :data:`LAG_RECORDS` records behind, and further behind than
  :data:`WINDOW_S` seconds ago;
- ``ok``.

Pure: the caller passes the time and the workers' figures; no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ferry.subscription import INTERNAL_PREFIX, PartitionRef

HISTORY_S = 3600.0
"""How far back the history reaches."""
WINDOW_S = 60.0
"""The stretch of history health is judged on."""
STALL_S = 60.0
"""A watermark held this long is ``stalled``."""
LAG_RECORDS = 1000
"""Lag above this and growing is ``lagging``."""

HEALTH = ("ok", "lagging", "stalled", "failing", "paused", "unknown")


@dataclass(frozen=True)
class Point:
    """One sample of a subscription or of one partition: what happened since the sample before,
    ``interval_s`` earlier."""

    t_ms: int
    lag: int
    delivered: int  # in this interval
    retried: int
    dead_lettered: int
    stalled_s: float
    interval_s: float

    @property
    def delivered_per_s(self) -> float:
        return self.delivered / self.interval_s

    @property
    def retried_per_s(self) -> float:
        return self.retried / self.interval_s

    @property
    def dead_lettered_per_s(self) -> float:
        return self.dead_lettered / self.interval_s

    def doc(self) -> dict[str, Any]:
        return {
            "t": self.t_ms,
            "lag": self.lag,
            "delivered_per_s": round(self.delivered_per_s, 2),
            "retried_per_s": round(self.retried_per_s, 2),
            "dead_lettered_per_s": round(self.dead_lettered_per_s, 2),
            "stalled_s": self.stalled_s,
        }


@dataclass
class _Seen:
    owner: tuple[str, int]  # (worker, epoch)
    counters: tuple[int, int, int]  # delivered, retried, dead-lettered, as that owner counts them


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0


class History:
    """Points per subscription and per partition, the last hour of them."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.capacity = max(2, math.ceil(HISTORY_S / interval_s))
        self._subs: dict[str, deque[Point]] = {}
        self._parts: dict[PartitionRef, deque[Point]] = {}
        self._seen: dict[PartitionRef, _Seen] = {}
        self._last_t_ms: int | None = None

    def observe(self, now_ms: int, stats: Mapping[PartitionRef, Mapping[str, Any]]) -> None:
        """One sample: every partition a worker reports (``worker_stats()`` of the portal's cluster)."""
        first_sample = self._last_t_ms is None
        dt_s = (now_ms - self._last_t_ms) / 1000 if self._last_t_ms is not None else self.interval_s
        dt_s = max(dt_s, 1e-3)
        self._last_t_ms = now_ms
        per_sub: dict[str, list[Point]] = {}
        for ref, st in stats.items():
            if ref.subscription.startswith(INTERNAL_PREFIX):
                continue
            counters = (_int(st.get("delivered")), _int(st.get("retried")), _int(st.get("dead_lettered")))
            owner = (str(st.get("worker", "")), _int(st.get("epoch")))
            prev = self._seen.get(ref)
            if prev is None:
                grown = (0, 0, 0) if first_sample else counters  # taken over since the last sample
            elif prev.owner != owner or any(c < p for c, p in zip(counters, prev.counters, strict=True)):
                grown = counters  # a new owner counts from 0 since it took over
            else:
                grown = tuple(c - p for c, p in zip(counters, prev.counters, strict=True))  # type: ignore[assignment]
            self._seen[ref] = _Seen(owner, counters)
            point = Point(now_ms, _int(st.get("lag")), *grown, float(st.get("stalled_s") or 0.0), dt_s)
            self._append(self._parts, ref, point)
            per_sub.setdefault(ref.subscription, []).append(point)
        for name, points in per_sub.items():
            total = Point(
                now_ms,
                sum(p.lag for p in points),
                sum(p.delivered for p in points),
                sum(p.retried for p in points),
                sum(p.dead_lettered for p in points),
                max(p.stalled_s for p in points),
                dt_s,
            )
            self._append(self._subs, name, total)
        for ref in [r for r in self._seen if r not in stats]:  # released and not yet taken: forget the owner
            del self._seen[ref]

    def _append(self, table: dict[Any, deque[Point]], key: Any, point: Point) -> None:
        ring = table.get(key)
        if ring is None:
            ring = table[key] = deque(maxlen=self.capacity)
        ring.append(point)

    def points(self, subscription: str) -> list[Point]:
        return list(self._subs.get(subscription, ()))

    def partitions(self, subscription: str) -> dict[PartitionRef, list[Point]]:
        return {ref: list(ring) for ref, ring in self._parts.items() if ref.subscription == subscription}

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the history of subscriptions that no longer exist."""
        alive = set(keep)
        for name in [n for n in self._subs if n not in alive]:
            del self._subs[name]
        for ref in [r for r in self._parts if r.subscription not in alive]:
            del self._parts[ref]

    def summary(self, subscription: str, state: str, now_ms: int) -> dict[str, Any]:
        """The list's row: health, and the figures it was judged on."""
        pts = self.points(subscription)
        recent = [p for p in pts if now_ms - p.t_ms <= WINDOW_S * 1000]
        last = pts[-1] if pts and now_ms - pts[-1].t_ms <= 3 * self.interval_s * 1000 else None
        return {
            "name": subscription,
            "state": state,
            "health": health(state, pts, now_ms),
            "lag": last.lag if last else None,
            "delivered_per_s": round(last.delivered_per_s, 2) if last else None,
            "retried_per_s": round(last.retried_per_s, 2) if last else None,
            "dead_lettered_per_s": round(last.dead_lettered_per_s, 2) if last else None,
            "dead_lettered_1h": sum(p.dead_lettered for p in pts),
            "dead_lettered_1m": sum(p.dead_lettered for p in recent),
            "stalled_s": last.stalled_s if last else None,
        }


def health(state: str, points: list[Point], now_ms: int) -> str:
    """See the module docstring."""
    if state == "paused":
        return "paused"
    recent = [p for p in points if now_ms - p.t_ms <= WINDOW_S * 1000]
    if not recent:
        return "unknown"
    retried = sum(p.retried for p in recent)
    delivered = sum(p.delivered for p in recent)
    if any(p.dead_lettered for p in recent) or retried > delivered:
        return "failing"
    now = recent[-1]
    if now.stalled_s >= STALL_S:
        return "stalled"
    before = [p for p in points if now_ms - p.t_ms >= WINDOW_S * 1000]
    if now.lag > LAG_RECORDS and before and now.lag > before[-1].lag:
        return "lagging"
    return "ok"
