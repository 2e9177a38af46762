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
