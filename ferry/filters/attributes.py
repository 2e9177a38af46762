"""A record's CloudEvents attributes as a filter sees them — those of its push (docs/contract.md
§4, without ``ce-``) plus its headers whose lowercased name is an attribute name — computed only
when read, so a filter on one header costs one header lookup. Used by the worker before pushing
and by the portal's record trace (which asks whether a record was filtered)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

CE_TYPE = "dev.ferry.kafka.record"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
_HEADER_ATTRIBUTE = re.compile(r"[a-z0-9]{1,20}")
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
        self._topic, self._partition, self._offset, self._key = topic, partition, offset, key
        self._headers, self._ts, self._cluster, self._sub = headers, timestamp_ms, cluster, subscription
        self._header_map: dict[str, str] | None = None

    def _own(self, name: str) -> str | None:
        if name == "id":
            return f"{self._topic}/{self._partition}/{self._offset}"
        if name == "kafkatopic":
            return self._topic
        if name == "kafkapartition":
            return str(self._partition)
        if name == "kafkaoffset":
            return str(self._offset)
        if name == "partitionkey":
            return None if self._key is None else quote(self._key, safe="")
        if name == "source":
            return f"/ferry/{self._cluster}/{self._sub}"
        if name == "type":
            return CE_TYPE
        if name == "specversion":
            return "1.0"
        if name == "time":
            return rfc3339_ms(self._ts)
        if name == "ferryattempt":
            return "1"
        if name == "datacontenttype":
            ct = self._map().get("content-type")
            return ct if ct is not None else DEFAULT_CONTENT_TYPE
        return None

    def _map(self) -> dict[str, str]:
        if self._header_map is None:
            found: dict[str, str] = {}
            for name, value in self._headers:
                lower = name.lower()
                if value is not None and lower not in found:
                    found[lower] = value.decode("utf-8", "replace")
            self._header_map = found
        return self._header_map

    def __getitem__(self, name: str) -> Any:
        v = self._own(name)
        if v is None and _HEADER_ATTRIBUTE.fullmatch(name):
            v = self._map().get(name)
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
        own = [*_OWN, "ferryattempt", "datacontenttype"] + (["partitionkey"] if self._key is not None else [])
        headers = [n for n in self._map() if _HEADER_ATTRIBUTE.fullmatch(n)]
        return iter(dict.fromkeys([*own, *headers]))

    def __len__(self) -> int:
        return sum(1 for _ in self)
