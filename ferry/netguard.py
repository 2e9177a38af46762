"""Which addresses a push endpoint may target (SSRF guard), checked at registration and at push time.

Refused always: link-local (169.254.0.0/16, fe80::/10, which holds most cloud metadata services),
known metadata addresses (AWS/GCP/Azure 169.254.169.254, AWS IPv6 fd00:ec2::254, Alibaba
100.100.100.200, metadata.google.internal), and the unspecified/multicast/reserved ranges. An IPv6
address that embeds an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::a.b.c.d``, 6to4
``2002:AABB:CCDD::``) is judged by the IPv4 address it reaches. Host spellings the system resolver
reads as addresses (``2852039166``, ``0251.0376.0251.0376``, ``0x7f.1``) are resolved like any
name, so they are judged by the address they mean.
When ``FERRY_ENDPOINT_ALLOW`` is set, a target must also match one of its entries: a CIDR
(``10.0.0.0/8``, ``127.0.0.1/32``) matched against every resolved address, or a host pattern
(``*.svc.cluster.local``, ``billing``) matched against the URL's host name.

The push path resolves the host itself (through :meth:`EndpointPolicy.resolve`, the one seam
where tests inject a resolver) and checks every address it got; the connection then goes to a
checked address, so a DNS answer changed between check and connect (DNS rebinding) cannot be
used to reach a refused one.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ferry.errors import EndpointRefused, ValidationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL = 2048

METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog", "metadata"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)


NAT64 = ipaddress.ip_network("64:ff9b::/96")
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # Linux connects 0.x.y.z to the local host


def _unmapped(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one embeds (mapped, NAT64, 6to4), else the address itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def address_refusal(ip: IPAddress) -> str | None:
    """Why this address is never a valid push target, or None."""
    ip = _unmapped(ip)
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_unspecified or ip.is_multicast or ip in THIS_NETWORK:
        return "an unspecified or multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip.is_reserved:
        return "a reserved address"
    return None


class EndpointPolicy:
    """The allow-list plus the always-refused ranges; pure apart from :meth:`resolve`."""

    def __init__(self, allow: Sequence[str] = (), resolver: Callable[[str], list[IPAddress]] | None = None) -> None:
        self._resolver = resolver or resolve
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.patterns: list[str] = []
        for entry in allow:
            entry = entry.strip()
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.patterns.append(entry.lower())

    @property
    def restricted(self) -> bool:
        return bool(self.networks or self.patterns)

    def check_addresses(self, url: str, host: str, addresses: Iterable[IPAddress]) -> None:
        """Raise :class:`EndpointRefused` unless every address may be targeted."""
        host = _check_name(url, host)
        host_allowed = any(fnmatch.fnmatchcase(host, p) for p in self.patterns)
        addresses = list(addresses)
        if not addresses:
            raise EndpointRefused(f"endpoint host {host!r} did not resolve to any address")
        for ip in addresses:
            reason = address_refusal(ip)
            if reason:
                raise EndpointRefused(f"endpoint {url} resolves to {ip}, {reason}; choose another endpoint")
            if self.restricted and not host_allowed and not any(_unmapped(ip) in n for n in self.networks):
                raise EndpointRefused(
                    f"endpoint {url} ({ip}) is outside FERRY_ENDPOINT_ALLOW; add its network or host there"
                )

    def resolve(self, host: str) -> list[IPAddress]:
        """Blocking: the host's addresses (raises :class:`EndpointRefused` when it does not resolve)."""
        return self._resolver(host)

    def check_url(self, url: str) -> list[IPAddress]:
        """Resolve the URL's host and check it; returns the checked addresses."""
        host = urlsplit(url).hostname or ""
        _check_name(url, host)  # before asking DNS: a metadata name is refused wherever it points
        addresses = self.resolve(host)
        self.check_addresses(url, host, addresses)
        return addresses


def http_url(value: Any, field: str, purpose: str, credentials_hint: str, *, stored: bool = False) -> str:
    """``value`` as a URL Ferry sends requests to (an endpoint's, a transaction's ``check_url``),
    before its host is checked: http or https, a host, a valid port, no credentials — requests are
    never sent with the ``user:password@`` of a URL, so one that carries them is refused rather
    than silently stripped (``credentials_hint`` says what to do instead). Raises
    :class:`ValidationError` on ``field``; ``purpose`` ends "the http(s) URL …".

    Spaces and control characters are refused: the request line would carry them as they are
    (``POST /hook  HTTP/1.1`` for a pasted trailing space), which a strict server answers 400, so
    every record would be dead-lettered. ``stored``: a URL Ferry saved before this check keeps
    loading."""
    if not isinstance(value, str) or not value:
        raise ValidationError(field, f"is required: the http(s) URL {purpose}")
    if len(value) > MAX_URL:
        raise ValidationError(field, f"must be at most {MAX_URL} characters")
    if not stored and any(c <= " " or c == "\x7f" for c in value):
        raise ValidationError(field, "must not contain spaces or control characters; percent-encode them (%20)")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        raise ValidationError(field, "must use http or https")
    if not parts.hostname:
        raise ValidationError(field, "must name a host")
    if parts.username or parts.password:
        raise ValidationError(field, f"must not carry credentials; {credentials_hint}")
    try:
        _ = parts.port
    except ValueError:
        raise ValidationError(field, "has an invalid port") from None
    return value


def _check_name(url: str, host: str) -> str:
    """The normalised host name; raises :class:`EndpointRefused` for a metadata service name."""
    host = host.lower().rstrip(".")
    if host in METADATA_HOSTS:
        raise EndpointRefused(f"endpoint {url} targets a cloud metadata host")
    return host


def literal_address(host: str) -> IPAddress | None:
    """The address a host written as an IP literal (``10.0.0.1``, ``[::1]``) names; None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def resolve(host: str) -> list[IPAddress]:
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise EndpointRefused(f"endpoint host {host!r} does not resolve: {exc.strerror}") from None
    seen: dict[str, IPAddress] = {}
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]
        seen.setdefault(addr, ipaddress.ip_address(addr))
    return list(seen.values())
