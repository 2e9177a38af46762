"""The portal's history, kept in the metadata database so every replica answers alike.

Use case: several portal replicas behind one load balancer draw the same charts and badges, and a
restarted portal still shows the last hour. Each replica samples on the same clock: time is cut
into buckets of ``FERRY_PORTAL_HISTORY_INTERVAL_MS``, and in each bucket the replica whose insert
of the bucket's :class:`~ferry.db.HistorySample` row succeeds takes the sample; the others skip
the bucket. The sample is measured against the newest stored one (whoever took it: the owners'
counters are stored beside each partition's point), so rates neither double nor skip across
replicas, and it is written in the same transaction as its claim — a replica that dies midway
leaves a gap, never half a sample. The taker also drops what is older than an hour.

States of a bucket: unclaimed → taken (claim and points committed together). A replica whose
claim fails learns nothing else; one whose database is down logs once and tries the next bucket.

Cost: one row per partition of every subscription and one per subscription, per interval; an hour
of 1,000 partitions at 10 s is 360,000 rows. The list of subscriptions reads the last ~90 s of
totals and one sum per subscription; a subscription's page reads its hour.

Blocking (SQLAlchemy); the portal calls it in threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from ferry import db
from ferry.portal.history import HISTORY_S, WINDOW_S, Baseline, Point, Seen, step, summary
from ferry.subscription import PartitionRef

TOTAL = -1
"""``kafka_partition`` of a subscription's total."""


class HistoryStore:
    """The history in the database behind ``engine``; ``replica`` names this portal in the rows
    it takes."""

    def __init__(self, engine: Engine, interval_s: float, replica: str) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.replica = replica[:255]
        self._interval_ms = max(1, round(interval_s * 1000))

    def bucket(self, now_ms: int) -> int:
        return now_ms // self._interval_ms

    def seconds_to_next_bucket(self, now_ms: int) -> float:
        return (self._interval_ms - now_ms % self._interval_ms) / 1000

    def taken(self, now_ms: int) -> bool:
        """Whether another replica already took this bucket's sample (saves reading the workers)."""
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.select(db.HistorySample.bucket).where(db.HistorySample.bucket == self.bucket(now_ms))
            ).first()
        return found is not None

    def record(self, now_ms: int, stats: Mapping[PartitionRef, Mapping[str, Any]]) -> bool:
        """Take this bucket's sample of ``stats``; False when another replica took it first."""
        bucket = self.bucket(now_ms)
        try:
            with db.session(self.engine) as s:
                s.add(db.HistorySample(bucket=bucket, t_ms=now_ms, taken_by=self.replica))
                s.flush()  # the claim: a second replica's insert of the bucket fails here
                sample = step(self._baseline(s, bucket), now_ms, stats)
                rows = [_row(bucket, ref, point, seen) for ref, (point, seen) in sample.partitions.items()]
                rows += [
                    _row(bucket, PartitionRef(name, "", TOTAL), point, None) for name, point in sample.totals.items()
                ]
                if rows:
                    s.execute(sa.insert(db.HistoryPoint), rows)
                cutoff = now_ms - int((HISTORY_S + 2 * self.interval_s) * 1000)
                s.execute(sa.delete(db.HistoryPoint).where(db.HistoryPoint.t_ms < cutoff))
                s.execute(sa.delete(db.HistorySample).where(db.HistorySample.t_ms < cutoff))
        except sa.exc.IntegrityError:
            return False
        return True

    def _baseline(self, s: Session, bucket: int) -> Baseline | None:
        prev = s.execute(
            sa.select(db.HistorySample.bucket, db.HistorySample.t_ms)
            .where(db.HistorySample.bucket < bucket)
            .order_by(db.HistorySample.bucket.desc())
            .limit(1)
        ).first()
        if prev is None:
            return None
        p = db.HistoryPoint
        rows = s.execute(
            sa.select(
                p.subscription,
                p.topic,
                p.kafka_partition,
                p.cluster,
                p.worker,
                p.epoch,
                p.owner_delivered,
                p.owner_retried,
                p.owner_dead_lettered,
            ).where(p.bucket == prev.bucket, p.kafka_partition != TOTAL)
        ).all()
        seen = {
            PartitionRef(r.subscription, r.topic, r.kafka_partition, r.cluster): Seen(
                r.worker or "", r.epoch or 0, r.owner_delivered or 0, r.owner_retried or 0, r.owner_dead_lettered or 0
            )
            for r in rows
        }
        return Baseline(prev.t_ms, seen)

    # --- reading ------------------------------------------------------------------------------

    def hour(self, subscription: str, now_ms: int) -> tuple[list[Point], dict[PartitionRef, list[Point]]]:
        """The subscription's last hour, oldest first: its totals and each partition's points, in
        one read."""
        p = db.HistoryPoint
        query = (
            sa.select(p).where(p.subscription == subscription, p.t_ms > now_ms - int(HISTORY_S * 1000)).order_by(p.t_ms)
        )
        totals: list[Point] = []
        partitions: dict[PartitionRef, list[Point]] = {}
        with db.session(self.engine) as s:
            for r in s.scalars(query):
                if r.kafka_partition == TOTAL:
                    totals.append(_point(r))
                else:
                    ref = PartitionRef(r.subscription, r.topic, r.kafka_partition, r.cluster)
                    partitions.setdefault(ref, []).append(_point(r))
        return totals, partitions

    def summaries(self, subscriptions: Sequence[tuple[str, str]], now_ms: int) -> list[dict[str, Any]]:
        """The list's rows for ``(name, state)`` pairs: health and the figures it was judged on."""
        p = db.HistoryPoint
        since = now_ms - int((WINDOW_S + 3 * self.interval_s) * 1000)
        recent: dict[str, list[Point]] = {}
        with db.session(self.engine) as s:
            for r in s.scalars(sa.select(p).where(p.t_ms >= since, p.kafka_partition == TOTAL).order_by(p.t_ms)):
                recent.setdefault(r.subscription, []).append(_point(r))
            dead = dict(
                s.execute(
                    sa.select(p.subscription, sa.func.sum(p.dead_lettered))
                    .where(p.t_ms > now_ms - int(HISTORY_S * 1000), p.kafka_partition == TOTAL)
                    .group_by(p.subscription)
                ).all()
            )
        return [
            summary(name, state, recent.get(name, []), int(dead.get(name) or 0), self.interval_s, now_ms)
            for name, state in subscriptions
        ]


def _row(bucket: int, ref: PartitionRef, point: Point, seen: Seen | None) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "t_ms": point.t_ms,
        "subscription": ref.subscription,
        "cluster": ref.cluster,
        "topic": ref.topic,
        "kafka_partition": ref.partition,
        "lag_records": point.lag,
        "delivered": point.delivered,
        "retried": point.retried,
        "dead_lettered": point.dead_lettered,
        "stalled_s": point.stalled_s,
        "interval_s": point.interval_s,
        "worker": seen.worker if seen else None,
        "epoch": seen.epoch if seen else None,
        "owner_delivered": seen.delivered if seen else None,
        "owner_retried": seen.retried if seen else None,
        "owner_dead_lettered": seen.dead_lettered if seen else None,
    }


def _point(r: db.HistoryPoint) -> Point:
    return Point(r.t_ms, r.lag_records, r.delivered, r.retried, r.dead_lettered, r.stalled_s, r.interval_s)
