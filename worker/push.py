"""Push: one Kafka record → one HTTP POST in CloudEvents binary content mode (CONTRACT section 4).

:func:`cloudevent_headers` is pure and builds exactly the contract's headers. :class:`PushClient`
is the one small interface the partitions push through: a pooled aiohttp session with
keep-alive connections per endpoint, a per-request timeout, and a resolver that checks every
address against the SSRF policy at connect time, so a DNS answer that changed after
registration cannot reach a refused address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from ferry.errors import EndpointRefused
from ferry.netguard import EndpointPolicy, IPAddress
from ferry.subscription import HEADER_NAME_RE, RESERVED_HEADERS, Subscription

CE_TYPE = "dev.ferry.kafka.record"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
# Record headers Ferry never forwards: its own, hop-by-hop, and ones that would change the request.
_NOT_FORWARDED = RESERVED_HEADERS | {"content-type", "expect", "upgrade", "te", "trailer", "keep-alive"}


@dataclass(slots=True)
class Record:
    """What a partition needs of a fetched Kafka record."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int = 0

    @property
    def size(self) -> int:
        return len(self.value or b"") + len(self.key or b"") + 64

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


def rfc3339_ms(timestamp_ms: int) -> str:
    return (
        datetime.fromtimestamp(timestamp_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"
    )


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


def cloudevent_headers(record: Record, cluster: str, subscription: str, attempt: int) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in record.headers:
        if value is None or not HEADER_NAME_RE.fullmatch(name):
            continue
        lower = name.lower()
        if lower.startswith("ce-") or lower in _NOT_FORWARDED:
            continue
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
    if record.key is not None:
        headers["ce-partitionkey"] = quote(record.key, safe="")
    headers["ce-ferryattempt"] = str(attempt)
    return headers


@dataclass(frozen=True, slots=True)
class PushResult:
    status: int | None
    """HTTP status, or None when no answer came (``error`` says why)."""
    retry_after: str | None = None
    error: str | None = None


class GuardedResolver(AbstractResolver):
    """Resolves like aiohttp's default resolver, then refuses addresses the SSRF policy forbids."""

    def __init__(self, policy: EndpointPolicy) -> None:
        self._inner = DefaultResolver()
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        addresses: Iterable[IPAddress] = [ipaddress.ip_address(r["host"]) for r in results]
        self._policy.check_addresses(f"http://{host}:{port}/", host, addresses)
        return results

    async def close(self) -> None:
        await self._inner.close()


class PushClient:
    """The push path's HTTP client: one pooled session for the whole worker."""

    def __init__(self, policy: EndpointPolicy, cluster: str, limit_per_host: int = 256) -> None:
        self.cluster = cluster
        self._policy = policy
        self._limit_per_host = limit_per_host
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=self._limit_per_host,
            resolver=GuardedResolver(self._policy),
            ttl_dns_cache=10,
            keepalive_timeout=30,
        )
        self._session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def push(self, sub: Subscription, record: Record, attempt: int) -> PushResult:
        assert self._session is not None, "PushClient.start() first"
        headers: dict[str, Any] = dict(sub.endpoint.headers)
        headers.update(cloudevent_headers(record, self.cluster, sub.name, attempt))
        timeout = aiohttp.ClientTimeout(total=sub.endpoint.timeout_ms / 1000)
        try:
            async with self._session.post(
                sub.endpoint.url,
                data=record.value or b"",
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as resp:
                # The body is not used. A small one is read so the connection is reused; a large or
                # endless one must not hold an acknowledged push hostage, so that connection is dropped.
                if resp.content_length is not None and resp.content_length <= 65536:
                    await resp.read()
                else:
                    resp.close()
                return PushResult(resp.status, retry_after=resp.headers.get("Retry-After"))
        except EndpointRefused as exc:
            return PushResult(None, error=f"refused: {exc}")
        except TimeoutError:
            return PushResult(None, error=f"timed out after {sub.endpoint.timeout_ms} ms")
        except aiohttp.ClientConnectorError as exc:
            cause = exc.os_error
            if isinstance(cause, EndpointRefused):
                return PushResult(None, error=f"refused: {cause}")
            return PushResult(None, error=f"cannot connect: {exc}")
        except (aiohttp.ClientError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            return PushResult(None, error=f"{type(exc).__name__}: {exc}")
