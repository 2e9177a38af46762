"""A record's CloudEvents attributes as a filter sees them — those of its push (docs/contract.md
§4, without ``ce-``) plus its headers whose lowercased name is an attribute name — computed only
when read, so a filter on one header costs one header lookup. Used by the worker before pushing
and by the portal's record trace (which asks whether a record was filtered)."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

CE_TYPE = "dev.ferry.kafka.record"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
_HEADER_ATTRIBUTE = re.compile(r"[a-z0-9]{1,20}")
_UNRESERVED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~"  # quote() keeps them
_SCAN_HEADERS = 8  # up to this many headers, a lookup scans them
_OWN = ("id", "source", "type", "specversion", "time", "kafkatopic", "kafkapartition", "kafkaoffset")


def rfc3339_ms(timestamp_ms: int) -> str:
    seconds, ms = divmod(timestamp_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds)) + f"{ms:03d}Z"


class RecordAttributes(Mapping[str, Any]):
    __slots__ = ("_cluster", "_header_map", "_headers", "_key", "_offset", "_partition", "_sub", "_topic", "_ts")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int,
        cluster: str,
        subscription: str,
    ) -> None:
        self._cluster, self._sub = cluster, subscription
        self._header_map: dict[str, bytes] | None = None
        self.reset(topic, partition, offset, key, headers, timestamp_ms)

    def reset(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int,
    ) -> RecordAttributes:
        """The same view over another record of the same subscription (no allocation per record:
        a fetch's records are filtered one after another through one view)."""
        self._topic, self._partition, self._offset, self._key = topic, partition, offset, key
        self._headers, self._ts, self._header_map = headers, timestamp_ms, None
        return self

    def _header(self, name: str) -> bytes | None:
        """The value of the first header named ``name`` (lowercased) that has a value: a scan
        of a few headers, a dict built once for many."""
        headers = self._headers
        if len(headers) <= _SCAN_HEADERS:
            return header_value(headers, name)
        if self._header_map is None:
            self._header_map = {n.lower(): v for n, v in reversed(headers) if v is not None}
        return self._header_map.get(name)

    def get(self, name: str, default: Any = None) -> Any:
        v = reader(name)(self)
        return default if v is None else v

    def __getitem__(self, name: str) -> Any:
        v = self.get(name)
        if v is None:
            raise KeyError(name)
        return v

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        own = [*_OWN, "ferryattempt", "datacontenttype"] + (["partitionkey"] if self._key is not None else [])
        names = (n.lower() for n, v in self._headers if v is not None)
        headers = [n for n in names if _HEADER_ATTRIBUTE.fullmatch(n)]
        return iter(dict.fromkeys([*own, *headers]))

    def __len__(self) -> int:
        return sum(1 for _ in self)


@functools.lru_cache(maxsize=4096)
def reader(name: str) -> Callable[[RecordAttributes], Any]:
    """How to read attribute ``name`` of a record (None: it has none): its own value, else a
    header's when the name is an attribute name. Made once per name, so code compiled once per
    filter and run per record (:mod:`ferry.filters.cesql_codegen`) does no lookup by name."""
    own = _OWN_VALUES.get(name)
    header = _attribute_name(name)

    def from_header(a: RecordAttributes) -> str | None:
        raw = a._header(name)
        return None if raw is None else raw.decode("utf-8", "replace")

    if own is None:
        return from_header if header else lambda a: None
    if not header or name not in _OWN_MAY_LACK:
        return own  # a header of the name is never read

    def own_or_header(a: RecordAttributes) -> str | None:
        v = own(a)
        return v if v is not None else from_header(a)

    return own_or_header


@functools.lru_cache(maxsize=4096)
def _attribute_name(name: str) -> bool:
    """Whether a header of this name is an attribute (the names a filter reads: few, so kept)."""
    return _HEADER_ATTRIBUTE.fullmatch(name) is not None


def partitionkey_text(key: bytes) -> str:
    """A record key as the ``partitionkey`` attribute: percent-encoded where needed."""
    if not key.translate(None, _UNRESERVED):  # nothing to percent-encode
        return key.decode("ascii")
    return quote(key, safe="")


def header_value(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The value of the first header named ``name`` (lowercased) that has a value."""
    for n, v in headers:
        if v is not None and (n == name or n.lower() == name):
            return v
    return None


def header_text(headers: Sequence[tuple[str, bytes | None]], name: str) -> str | None:
    """:func:`header_value` as text: what a filter reads for a header attribute."""
    raw = header_value(headers, name)
    return None if raw is None else raw.decode("utf-8", "replace")


def content_type_text(raw: bytes | None) -> str:
    """The ``datacontenttype`` attribute of a record whose ``content-type`` header is ``raw``."""
    return DEFAULT_CONTENT_TYPE if raw is None else raw.decode("utf-8", "replace")


def _partitionkey(a: RecordAttributes) -> str | None:
    key = a._key
    return None if key is None else partitionkey_text(key)


def _datacontenttype(a: RecordAttributes) -> str:
    return content_type_text(a._header("content-type"))


_OWN_MAY_LACK = frozenset({"partitionkey"})
"""The own attributes a record may lack (a header may give them); every other one it always has."""

PER_PARTITION = frozenset({"kafkatopic", "kafkapartition", "source", "type", "specversion", "ferryattempt"})
"""The own attributes whose value is the same for every record of a partition of a subscription
(as filters see them: ``ferryattempt`` is 1 before the first push)."""

# attribute name → its value for a record (``None``: the record has none; a header may give it)
_OWN_VALUES: dict[str, Callable[[RecordAttributes], str | None]] = {
    "id": lambda a: f"{a._topic}/{a._partition}/{a._offset}",
    "kafkatopic": lambda a: a._topic,
    "kafkapartition": lambda a: str(a._partition),
    "kafkaoffset": lambda a: str(a._offset),
    "partitionkey": _partitionkey,
    "source": lambda a: f"/ferry/{a._cluster}/{a._sub}",
    "type": lambda a: CE_TYPE,
    "specversion": lambda a: "1.0",
    "time": lambda a: rfc3339_ms(a._ts),
    "ferryattempt": lambda a: "1",
    "datacontenttype": _datacontenttype,
}
