"""Push: one Kafka record → one HTTP POST in CloudEvents binary content mode (docs/contract.md §4).

:func:`cloudevent_headers` is pure and builds exactly the contract's headers. :class:`PushClient`
is the one small interface the partitions push through, over :mod:`worker.http1` (keep-alive
pools, per-request timeout, every address checked against the SSRF policy at connect time, so
a DNS answer that changed after registration cannot reach a refused address).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote

from ferry import log
from ferry.errors import EndpointRefused
from ferry.netguard import EndpointPolicy
from ferry.subscription import HEADER_NAME_RE, RESERVED_HEADERS, Subscription
from ferry.worker.http1 import Http1Pool, PushError, encode_header_lines

_log = log.get_logger(__name__)
_new_tuple = tuple.__new__
# CloudEvents headers that change from record to record (PushClient.header_lines formats them).
_PER_RECORD = ("ce-id", "ce-time", "ce-kafkaoffset", "ce-partitionkey", "ce-ferryattempt")
_CACHE_MAX = 4096
NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()
CE_TYPE = "dev.ferry.kafka.record"
BATCH_CONTENT_TYPE = "application/cloudevents-batch+json"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# Record headers Ferry never forwards: its own, hop-by-hop, and ones that would change the request.
_CE_TRACE = frozenset({"ce-traceparent", "ce-tracestate"})
"""The CloudEvents distributed-tracing extension: a record's own ones pass (worker/tracing.py)."""
_NOT_FORWARDED = RESERVED_HEADERS | {"content-type", "expect", "upgrade", "te", "trailer", "keep-alive"}


class _RecordFields(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_ms: int
    size: int
    """What the prefetch bound counts: value + key + 64 bytes."""


class Record(_RecordFields):
    """What a partition needs of a fetched Kafka record (immutable).

    A tuple: the fetch thread builds one per fetched record with ``tuple.__new__`` (C, no Python
    frame), where a class with an ``__init__`` cost ~1 µs per record of the GIL the
    event loop needs (bench/batch.py profile). ``size`` is computed there once.
    """

    __slots__ = ()

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        timestamp_ms: int = 0,
    ) -> Record:
        size = (len(value) if value else 0) + (len(key) if key else 0) + 64
        return _new_tuple(cls, (topic, partition, offset, key, value, tuple(headers or NO_HEADERS), timestamp_ms, size))

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


@functools.lru_cache(maxsize=256)
def utc_second(seconds: int) -> str:
    """``seconds`` since the epoch as RFC 3339 UTC up to the seconds and the dot."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(seconds))


def rfc3339_ms(timestamp_ms: int) -> str:
    """Records of one fetch share their second: formatting it once per second, not per record,
    was ~10 % of the single-record path (bench/worker_profile.py)."""
    seconds, ms = divmod(timestamp_ms, 1000)
    return f"{utc_second(seconds)}{ms:03d}Z"


def _header_value(raw: bytes) -> str:
    """Printable ASCII passes as is; anything else (binary, CR/LF, non-ASCII) is percent-encoded,
    so every record header reaches the endpoint and none can break the request."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return quote(raw, safe="")
    if all(" " <= c <= "~" for c in text):
        return text
    return quote(raw, safe="")


def cloudevent_headers(
    record: Record, cluster: str, subscription: str, attempt: int, kafka_cluster: str = "default"
) -> dict[str, str]:
    headers: dict[str, str] = {}
    named: dict[str, str] = {}  # lower-case name → the spelling kept: a repeated name is sent once
    for name, value in record.headers:
        if value is None or not HEADER_NAME_RE.fullmatch(name):
            continue
        lower = name.lower()
        if (lower.startswith("ce-") and lower not in _CE_TRACE) or lower in _NOT_FORWARDED:
            continue
        before = named.get(lower)
        if before is not None and before != name:
            del headers[before]
        named[lower] = name
        headers[name] = _header_value(value)
    content_type = record.header("content-type")
    headers["Content-Type"] = _header_value(content_type) if content_type else DEFAULT_CONTENT_TYPE
    headers["ce-specversion"] = "1.0"
    headers["ce-id"] = f"{record.topic}/{record.partition}/{record.offset}"
    headers["ce-source"] = f"/ferry/{cluster}/{subscription}"
    headers["ce-type"] = CE_TYPE
    headers["ce-time"] = rfc3339_ms(record.timestamp_ms)
    headers["ce-kafkatopic"] = record.topic
    headers["ce-kafkapartition"] = str(record.partition)
    headers["ce-kafkaoffset"] = str(record.offset)
    if kafka_cluster != "default":
        # ce-id is unique per Kafka cluster: a record of another cluster says which (docs/zones.md).
        headers["ce-kafkacluster"] = kafka_cluster
    if record.key is not None:
        headers["ce-partitionkey"] = quote(record.key, safe="")
    headers["ce-ferryattempt"] = str(attempt)
    return headers


def with_endpoint_headers(headers: dict[str, str], endpoint: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with the subscription's own ``endpoint.headers`` added: a record header of the
    same name in any letter case gives way, so the endpoint receives the configured value once
    (not the producer's ``authorization`` beside the subscription's ``Authorization``)."""
    if not endpoint:
        return headers
    taken = {name.lower() for name in endpoint}
    out = {k: v for k, v in headers.items() if k.lower() not in taken}
    out.update(endpoint)
    return out


class PushResult(NamedTuple):
    """What one push came to (a tuple, like :class:`worker.http1.Answer`: one per request)."""

    status: int | None
    """HTTP status, or None when no answer came (``error`` says why)."""
    retry_after: str | None = None
    error: str | None = None


class Tracing(Protocol):
    """Spans around pushes (worker/tracing.py)."""

    def start(self, sub: Subscription, record: Record, attempt: int) -> tuple[Record, bytes, Any]: ...
    def end(self, span: Any, result: PushResult) -> None: ...


class PushClient:
    """The push path's HTTP client: one keep-alive pool per endpoint origin for the whole worker."""

    def __init__(self, policy: EndpointPolicy, cluster: str, limit_per_host: int = 256) -> None:
        self.cluster = cluster
        self._pool = Http1Pool(policy, max_per_origin=limit_per_host)
        # (subscription, topic, partition, header set, Kafka cluster) -> (the subscription it was
        # built for, the encoded header lines that do not change from record to record).
        self._constant: dict[
            tuple[str, str, int, Sequence[tuple[str, bytes | None]], str], tuple[Subscription, bytes]
        ] = {}
        self._key_lines: dict[bytes, bytes] = {}
        self.tracing: Tracing | None = None
        """OpenTelemetry spans around pushes (worker/tracing.py); None unless configured."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._pool.close()

    async def push_batch(self, sub: Subscription, body: bytes, read_body: int) -> BatchPushResult:
        """POST one CloudEvents batch (body built by :mod:`worker.batch`) and read up to
        ``read_body`` bytes of the answer."""
        headers = with_endpoint_headers({"Content-Type": BATCH_CONTENT_TYPE}, sub.endpoint.headers)
        try:
            answer = await self._pool.post(
                sub.endpoint.url, headers, body, sub.endpoint.timeout_ms / 1000, read_body=read_body
            )
        except EndpointRefused as exc:
            return BatchPushResult(None, error=f"refused: {exc}")
        except PushError as exc:
            return BatchPushResult(None, error=str(exc))
        return BatchPushResult(answer.status, answer.retry_after, answer.body, answer.truncated)

    def hold_until(self, sub: Subscription, topic: str, partition: int) -> Callable[[Record], float] | None:
        """For a partition whose records must not start before a time that rises with their
        offsets: that time (epoch ms) per record, so the partition admits each record only then
        instead of holding it in flight (see :meth:`worker.window.Window.take_due`). A consumer
        delay (``delay_ms``) with ``ordering: none``; None otherwise."""
        if sub.delay_ms and sub.ordering == "none":
            wait = sub.delay_ms
            return lambda r: r.timestamp_ms + wait
        return None

    def header_lines(self, sub: Subscription, record: Record, attempt: int, kafka_cluster: str = "default") -> bytes:
        """The request's header lines: :func:`cloudevent_headers` plus the endpoint's own headers,
        encoded. The lines that only depend on the subscription, the partition and the record's
        header set are encoded once and kept; per record only the id, time, offset, key and
        attempt are formatted (header building was ~15 % of the single-record path)."""
        ck = (sub.name, record.topic, record.partition, record.headers, kafka_cluster)
        found = self._constant.get(ck)
        if found is None or found[0] is not sub:
            headers = with_endpoint_headers(
                cloudevent_headers(record, self.cluster, sub.name, attempt, kafka_cluster), sub.endpoint.headers
            )
            for name in _PER_RECORD:
                headers.pop(name, None)
            if len(self._constant) >= _CACHE_MAX:
                self._constant.clear()
            found = self._constant[ck] = (sub, encode_header_lines(headers))
        key = record.key
        if key is None:
            key_line = b""
        else:
            key_line = self._key_lines.get(key, b"")
            if not key_line:
                if len(self._key_lines) >= _CACHE_MAX:
                    self._key_lines.clear()
                key_line = self._key_lines[key] = b"\r\nce-partitionkey: " + quote(key, safe="").encode()
        offset = record.offset
        ce_id = f"{record.topic}/{record.partition}/{offset}"
        return (
            found[1]
            + (
                f"\r\nce-id: {ce_id}\r\nce-time: {rfc3339_ms(record.timestamp_ms)}"
                f"\r\nce-kafkaoffset: {offset}\r\nce-ferryattempt: {attempt}"
            ).encode()
            + key_line
        )

    async def push(self, sub: Subscription, record: Record, attempt: int, kafka_cluster: str = "default") -> PushResult:
        tracing = self.tracing
        if tracing is None:
            return await self._post(sub, record, attempt, kafka_cluster)
        untraced, trace_lines, span = tracing.start(sub, record, attempt)
        result = await self._post(sub, untraced, attempt, kafka_cluster, trace_lines)
        tracing.end(span, result)
        return result

    async def _post(
        self, sub: Subscription, record: Record, attempt: int, kafka_cluster: str, extra: bytes = b""
    ) -> PushResult:
        try:
            answer = await self._pool.post_lines(
                sub.endpoint.url,
                self.header_lines(sub, record, attempt, kafka_cluster) + extra,
                record.value or b"",
                sub.endpoint.timeout_ms / 1000,
            )
        except EndpointRefused as exc:
            return PushResult(None, error=f"refused: {exc}")
        except PushError as exc:
            return PushResult(None, error=str(exc))
        except Exception as exc:  # a client bug must cost one retry, never the partition's delivery task
            _log.error("push.client_failed", subscription=sub.name, error=type(exc).__name__, exc_info=True)
            return PushResult(None, error=f"push failed: {type(exc).__name__}")
        return PushResult(answer.status, retry_after=answer.retry_after)


@dataclass(frozen=True, slots=True)
class BatchPushResult:
    """The answer to one batch POST: status and body (read up to a limit), or why none came."""

    status: int | None
    retry_after: str | None = None
    body: bytes = b""
    truncated: bool = False
    error: str | None = None
