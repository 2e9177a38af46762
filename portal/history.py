"""A short history of every subscription's delivery, and its health at a glance.

Use case: the portal's list shows, per subscription, whether it is fine, behind, failing or stuck,
and its page draws lag and throughput over the last hour — charts that survive a reload, because
the portal keeps the points, not the browser. The portal samples what the workers publish about
their partitions (``/ferry/<cluster>/stats/<worker>``: committed, high watermark, counters, the
watermark stall) every ``FERRY_PORTAL_HISTORY_INTERVAL_MS``; :func:`step` turns one such report
into a :class:`Sample`, measured against the previous sample's :class:`Baseline`
(:mod:`ferry.portal.history_store` keeps the samples in the metadata database, so every portal
replica answers from the same history and a restarted portal keeps it).

Counters are a partition owner's own (they start at 0 when a worker takes a partition over): a
rate is the counter's growth since the previous sample of the same owner. A partition missing
from the previous sample was taken over since, so all its counts are new; in a sample with no
previous one counters only set the baseline (no spike for what a worker counted before the portal
started).

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

from collections.abc import Mapping
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
    interval_s: float  # 0 in a baseline sample (its counts are 0)

    @property
    def delivered_per_s(self) -> float:
        return self.delivered / self.interval_s if self.interval_s else 0.0

    @property
    def retried_per_s(self) -> float:
        return self.retried / self.interval_s if self.interval_s else 0.0

    @property
    def dead_lettered_per_s(self) -> float:
        return self.dead_lettered / self.interval_s if self.interval_s else 0.0

    def doc(self) -> dict[str, Any]:
        return {
            "t": self.t_ms,
            "lag": self.lag,
            "delivered_per_s": round(self.delivered_per_s, 2),
            "retried_per_s": round(self.retried_per_s, 2),
            "dead_lettered_per_s": round(self.dead_lettered_per_s, 2),
            "stalled_s": self.stalled_s,
        }


@dataclass(frozen=True)
class Seen:
    """A partition's owner at a sample, and its counters as that owner counts them."""

    worker: str
    epoch: int
    delivered: int
    retried: int
    dead_lettered: int

    def counters(self) -> tuple[int, int, int]:
        return (self.delivered, self.retried, self.dead_lettered)


@dataclass(frozen=True)
class Baseline:
    """What a sample is measured against: the previous sample's time and owners' counters."""

    t_ms: int
    seen: Mapping[PartitionRef, Seen]


@dataclass(frozen=True)
class Sample:
    """One sample: each partition's point and owner, each subscription's total."""

    t_ms: int
    partitions: dict[PartitionRef, tuple[Point, Seen]]
    totals: dict[str, Point]

    def baseline(self) -> Baseline:
        return Baseline(self.t_ms, {ref: seen for ref, (_, seen) in self.partitions.items()})


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0


def step(previous: Baseline | None, now_ms: int, stats: Mapping[PartitionRef, Mapping[str, Any]]) -> Sample:
    """The sample of ``stats`` (every partition a worker reports: ``worker_stats()`` of the
    portal's cluster), measured against the previous sample. With no previous sample, or one
    older than :data:`HISTORY_S`, counters only set the baseline."""
    if previous is not None and now_ms - previous.t_ms > HISTORY_S * 1000:
        previous = None
    dt_s = max((now_ms - previous.t_ms) / 1000, 1e-3) if previous is not None else 0.0
    partitions: dict[PartitionRef, tuple[Point, Seen]] = {}
    per_sub: dict[str, list[Point]] = {}
    for ref, st in stats.items():
        if ref.subscription.startswith(INTERNAL_PREFIX):
            continue
        seen = Seen(
            str(st.get("worker", "")),
            _int(st.get("epoch")),
            _int(st.get("delivered")),
            _int(st.get("retried")),
            _int(st.get("dead_lettered")),
        )
        counters = seen.counters()
        prev = previous.seen.get(ref) if previous is not None else None
        if previous is None:
            grown = (0, 0, 0)
        elif prev is None:
            grown = counters  # taken over since the last sample: all its counts are new
        elif (prev.worker, prev.epoch) != (seen.worker, seen.epoch) or any(
            c < p for c, p in zip(counters, prev.counters(), strict=True)
        ):
            grown = counters  # a new owner counts from 0 since it took over
        else:
            grown = tuple(c - p for c, p in zip(counters, prev.counters(), strict=True))  # type: ignore[assignment]
        point = Point(now_ms, _int(st.get("lag")), *grown, float(st.get("stalled_s") or 0.0), dt_s)
        partitions[ref] = (point, seen)
        per_sub.setdefault(ref.subscription, []).append(point)
    totals = {
        name: Point(
            now_ms,
            sum(p.lag for p in points),
            sum(p.delivered for p in points),
            sum(p.retried for p in points),
            sum(p.dead_lettered for p in points),
            max(p.stalled_s for p in points),
            dt_s,
        )
        for name, points in per_sub.items()
    }
    return Sample(now_ms, partitions, totals)


def summary(
    subscription: str, state: str, points: list[Point], dead_lettered_1h: int, interval_s: float, now_ms: int
) -> dict[str, Any]:
    """The list's row: health, and the figures it was judged on. ``points`` are the
    subscription's totals, oldest first, reaching back at least :data:`WINDOW_S` and three
    intervals; ``dead_lettered_1h`` sums the last :data:`HISTORY_S`."""
    recent = [p for p in points if now_ms - p.t_ms <= WINDOW_S * 1000]
    last = points[-1] if points and now_ms - points[-1].t_ms <= 3 * interval_s * 1000 else None
    return {
        "name": subscription,
        "state": state,
        "health": health(state, points, now_ms),
        "lag": last.lag if last else None,
        "delivered_per_s": round(last.delivered_per_s, 2) if last else None,
        "retried_per_s": round(last.retried_per_s, 2) if last else None,
        "dead_lettered_per_s": round(last.dead_lettered_per_s, 2) if last else None,
        "dead_lettered_1h": dead_lettered_1h,
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
