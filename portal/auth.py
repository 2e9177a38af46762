"""Who is calling: ``Authorization: Bearer <token>`` → a principal with a scope.

The bootstrap admin token (``FERRY_ADMIN_TOKEN``) is compared in constant time; further tokens
are looked up by their SHA-256 hash (the plaintext is never stored). ``read`` tokens may call
every GET; writes need ``admin``. The UI sends the same header (no cookies), so there is no
ambient credential for a cross-site request to ride on; :mod:`portal.csrf` refuses cross-site
writes anyway (defence in depth).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from ferry import db


@dataclass(frozen=True)
class Principal:
    name: str
    scope: str  # "admin" | "read"

    @property
    def admin(self) -> bool:
        return self.scope == "admin"


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authenticate(token: str, admin_token: str, engine: Engine) -> Principal | None:
    """Blocking (database lookup): the principal for a token, or None."""
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return Principal("admin", "admin")
    with db.session(engine) as s:
        row = db.find_token(s, token)
        if row is None:
            return None
        row.last_used_at = db.utcnow()
        return Principal(row.name, row.scope)


class FailedLogins:
    """Rate limit for wrong tokens, per client address: after ``limit`` failures within
    ``window_s`` the client is refused for ``block_s`` (429), so tokens cannot be guessed at
    speed. Pure: the caller passes the clock."""

    def __init__(self, limit: int = 10, window_s: float = 60.0, block_s: float = 60.0) -> None:
        self.limit = limit
        self.window_s = window_s
        self.block_s = block_s
        self._failures: dict[str, list[float]] = {}
        self._blocked_until: dict[str, float] = {}

    def blocked_for_s(self, client: str, now: float) -> float:
        until = self._blocked_until.get(client, 0.0)
        if until <= now:
            self._blocked_until.pop(client, None)
            return 0.0
        return until - now

    def failed(self, client: str, now: float) -> None:
        recent = [t for t in self._failures.get(client, []) if now - t < self.window_s]
        recent.append(now)
        if len(recent) >= self.limit:
            self._blocked_until[client] = now + self.block_s
            recent = []
        self._failures[client] = recent
        if len(self._failures) > 10_000:  # bounded memory under a spray of addresses
            self._failures = {c: ts for c, ts in self._failures.items() if ts and now - ts[-1] < self.window_s}

    def succeeded(self, client: str) -> None:
        self._failures.pop(client, None)
