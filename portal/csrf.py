"""Cross-site request refusal (CSRF defence in depth) for every state-changing request.

The portal has no ambient credential: the UI keeps its token in ``sessionStorage`` and sends
``Authorization: Bearer`` itself, and the portal sets no cookies and no CORS headers, so a page
on another site can neither read answers nor attach the token. Still, a state-changing request
(any method but GET, HEAD, OPTIONS) that a browser marks as coming from another site is refused
before authentication, so a future cookie or a mistaken CORS rule cannot turn into CSRF:

- ``Sec-Fetch-Site`` (sent by current browsers) must be ``same-origin`` or ``none`` (typed by the
  user); ``cross-site`` and ``same-site`` (a sibling sub-domain) are refused;
- without it, an ``Origin`` header must name this portal: its host and port must equal the
  request's ``Host`` (or the first ``X-Forwarded-Host`` a reverse proxy added); ``Origin: null``
  (sandboxed frames, some redirects) is refused;
- requests with neither header are not from a browser (curl, SDKs, scripts) and pass.

Pure: :func:`refusal` reads the method and headers and says why, or None.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})
DEFAULT_PORTS = {"http": 80, "https": 443}


def _netloc(host: str, port: int | None, scheme: str | None) -> str:
    host = host.lower().rstrip(".")
    if port is None or (scheme and DEFAULT_PORTS.get(scheme) == port):
        return host
    return f"{host}:{port}"


def _host_header(value: str) -> str | None:
    try:
        parts = urlsplit(f"//{value.strip()}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    if port in DEFAULT_PORTS.values():
        port = None  # Host carries no scheme; an explicit :80/:443 means the default either way
    return _netloc(parts.hostname, port, None)


def _origin(value: str) -> str | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return _netloc(parts.hostname, port, parts.scheme)


def refusal(method: str, headers: Mapping[str, str]) -> str | None:
    """Why this request looks cross-site and must be refused, or None."""
    if method.upper() in SAFE_METHODS:
        return None
    site = headers.get("Sec-Fetch-Site")
    if site is not None:
        if site.strip().lower() in ALLOWED_FETCH_SITES:
            return None
        return f"the browser marked this request Sec-Fetch-Site: {site}"
    origin = headers.get("Origin")
    if origin is None:
        return None
    mine = {_host_header(headers.get("Host", ""))}
    forwarded = headers.get("X-Forwarded-Host")
    if forwarded:
        mine.add(_host_header(forwarded.split(",")[0]))
    theirs = _origin(origin)
    if theirs is not None and theirs in mine:
        return None
    return f"Origin {origin[:100]!r} is not this portal"
