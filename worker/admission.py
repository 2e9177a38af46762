"""Which records a subscription's endpoint gets: its filter, applied before a record enters the
partition's window (docs/filters.md).

Use case: the partition runner asks :meth:`Admission.admits` for each fetched record; a rejected
record is acknowledged without a push and counted as ``filtered``. The filter is compiled once per
subscription document (:func:`ferry.filters.parse`), and a record's CloudEvents attributes are
computed only when the filter reads them (:class:`RecordAttributes`), so a filter on one header
costs one header lookup, not a CloudEvent. A filter whose evaluation errs rejects the record and
counts the error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from ferry import filters
from ferry.subscription import Subscription
from ferry.worker.push import CE_TYPE, DEFAULT_CONTENT_TYPE, Record, rfc3339_ms

_HEADER_ATTRIBUTE = re.compile(r"[a-z0-9]{1,20}")


class RecordAttributes(Mapping[str, Any]):
    """A record's attributes as its push would carry them (without ``ce-``), computed on demand."""

    __slots__ = ("_cluster", "_headers", "_record", "_sub")

    def __init__(self, record: Record, cluster: str, subscription: str) -> None:
        self._record = record
        self._cluster = cluster
        self._sub = subscription
        self._headers: dict[str, str] | None = None

    def _own(self, name: str) -> str | None:
        r = self._record
        if name == "id":
            return f"{r.topic}/{r.partition}/{r.offset}"
        if name == "kafkatopic":
            return r.topic
        if name == "kafkapartition":
            return str(r.partition)
        if name == "kafkaoffset":
            return str(r.offset)
        if name == "partitionkey":
            return None if r.key is None else quote(r.key, safe="")
        if name == "source":
            return f"/ferry/{self._cluster}/{self._sub}"
        if name == "type":
            return CE_TYPE
        if name == "specversion":
            return "1.0"
        if name == "time":
            return rfc3339_ms(r.timestamp_ms)
        if name == "ferryattempt":
            return "1"
        if name == "datacontenttype":
            ct = r.header("content-type")
            return ct.decode("utf-8", "replace") if ct is not None else DEFAULT_CONTENT_TYPE
        return None

    def _header_map(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = {}
            for name, value in self._record.headers:
                lower = name.lower()
                if value is not None and _HEADER_ATTRIBUTE.fullmatch(lower) and lower not in self._headers:
                    self._headers[lower] = value.decode("utf-8", "replace")
        return self._headers

    def __getitem__(self, name: str) -> Any:
        v = self._own(name)
        if v is None:
            v = self._header_map().get(name)
        if v is None:
            raise KeyError(name)
        return v

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        own = ["id", "source", "type", "specversion", "time", "kafkatopic", "kafkapartition", "kafkaoffset"]
        own += ["ferryattempt", "datacontenttype"] + (["partitionkey"] if self._record.key is not None else [])
        return iter(dict.fromkeys([*own, *self._header_map()]))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Admission:
    """The compiled filter of one subscription document, and its counters."""

    def __init__(self, sub: Subscription, cluster: str) -> None:
        self.document = sub.filter
        self._sub = sub.name
        self._cluster = cluster
        self._filter = filters.parse(sub.filter) if sub.filter is not None else None
        self.errors = 0

    @property
    def active(self) -> bool:
        return self._filter is not None

    def admits(self, record: Record) -> bool:
        if self._filter is None:
            return True
        ok, erred = self._filter.matches(RecordAttributes(record, self._cluster, self._sub))
        if erred:
            self.errors += 1
        return ok


def for_subscription(sub: Subscription, cluster: str, current: Admission | None = None) -> Admission:
    """The admission of ``sub``; ``current`` is kept when the filter did not change."""
    if current is not None and current.document == sub.filter:
        return current
    return Admission(sub, cluster)
