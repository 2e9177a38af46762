"""Which records a subscription's endpoint gets: its filter, applied before a record enters the
partition's window (docs/filters.md).

Use case: the partition runner hands each fetch to :meth:`Admission.split` (or, record by record
after a re-seek, asks :meth:`Admission.admits`); a rejected record is acknowledged without a push
and counted as ``filtered``. The filter is compiled once per subscription document and partition:
into one loop over a fetch (:mod:`ferry.filters.splitter`), and into a verdict on one record's
attributes, computed only when the filter reads them (:class:`RecordAttributes`) — for what the
loop does not cover. A filter whose evaluation errs rejects the record and counts the error.
"""

from __future__ import annotations

from ferry import filters
from ferry.filters.attributes import RecordAttributes
from ferry.filters.splitter import Layout, splitter
from ferry.subscription import Subscription
from ferry.worker.push import Record

LAYOUT = Layout(*(Record._fields.index(f) for f in ("offset", "key", "headers", "timestamp_ms")))


class Admission:
    """The compiled filter of one subscription document for one partition's records, and its
    counters."""

    def __init__(self, sub: Subscription, cluster: str, topic: str, partition: int) -> None:
        self.document = sub.filter
        self._filter = filters.parse(sub.filter, stored=True) if sub.filter is not None else None
        self._view = RecordAttributes("", 0, 0, None, (), 0, cluster, sub.name).reset  # one, reset per record
        # A fetch's records through one generated loop (ferry.filters.splitter), when it covers the filter.
        self._split = (
            splitter(self._filter, topic, partition, cluster, sub.name, LAYOUT) if self._filter is not None else None
        )
        self.errors = 0

    @property
    def active(self) -> bool:
        return self._filter is not None

    def admits(self, record: Record) -> bool:
        if self._filter is None:
            return True
        r = record
        ok, erred = self._filter.matches(self._view(r.topic, r.partition, r.offset, r.key, r.headers, r.timestamp_ms))
        if erred:
            self.errors += 1
        return ok

    def split(self, records: list[Record]) -> tuple[list[Record], list[Record]]:
        """(admitted, rejected), each in the order of ``records``: :meth:`admits` over a fetch,
        with the per-record lookups done once."""
        if self._filter is None:
            return records, []
        if self._split is not None:
            passed, failed, erred = self._split(records)
            self.errors += erred
            return passed, failed
        matches, view = self._filter.matches, self._view
        admitted: list[Record] = []
        rejected: list[Record] = []
        errors = 0
        for r in records:
            ok, erred = matches(view(r.topic, r.partition, r.offset, r.key, r.headers, r.timestamp_ms))
            if ok:
                admitted.append(r)
            else:
                rejected.append(r)
                errors += erred
        self.errors += errors
        return admitted, rejected


def for_subscription(
    sub: Subscription, cluster: str, topic: str, partition: int, current: Admission | None = None
) -> Admission:
    """The admission of ``sub`` for a partition's records; ``current`` is kept when the filter did
    not change."""
    if current is not None and current.document == sub.filter:
        return current
    return Admission(sub, cluster, topic, partition)
