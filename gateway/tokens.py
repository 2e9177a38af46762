"""Who may produce where: bearer tokens checked against the metadata database through a cache.

Use case: the gateway accepts the portal's tokens (docs/contract.md §9). ``admin`` tokens produce
anywhere, ``produce`` tokens only to topics matching one of their patterns (``*`` matches any run of
characters), ``read`` tokens never. A transaction (§11) is a produce: a token may commit or roll it
back where it may produce every record's topic; reading its state is also open to ``read`` tokens
(the portal lists transactions to them). The database is not on the write path:

- a token looked up is trusted for ``ttl_s`` (``FERRY_GATEWAY_TOKEN_CACHE_MS``): a token revoked in
  the portal stops working within that time;
- while the database cannot be read, tokens already known keep working (however old their
  entry), and an unknown token is answered 503 (it cannot be checked), never 401;
- a wrong token is remembered as wrong for a second, so a stream of them costs one query per second.

Blocking lookups run in a thread; the plaintext token is only hashed, never logged or stored.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hmac
import re
import time
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy.engine import Engine

from ferry import db, log
from ferry.errors import FerryError

_log = log.get_logger(__name__)
NEGATIVE_TTL_S = 1.0


class TokensUnavailable(FerryError):
    """The database cannot be read and the token is not known from before."""


@dataclass(frozen=True)
class Principal:
    name: str
    scope: str  # "admin" | "read" | "produce"
    topics: tuple[str, ...] = ()

    def may_produce(self, topic: str) -> bool:
        if self.scope == "admin":
            return True
        return self.scope == "produce" and any(_pattern(p).fullmatch(topic) for p in self.topics)

    def may_read(self, topic: str) -> bool:
        """Whether the token may see the state of what is written to ``topic`` (a transaction's):
        ``read`` tokens may, as in the portal; others where they may produce."""
        return self.scope == "read" or self.may_produce(topic)


@lru_cache(maxsize=4096)
def _pattern(glob: str) -> re.Pattern[str]:
    """``*`` matches any run of characters; every other character (``.`` included) is itself."""
    return re.compile(fnmatch.translate(glob.replace("?", "[?]").replace("[", "[[]")))


class TokenCache:
    def __init__(self, engine: Engine, admin_token: str, ttl_s: float) -> None:
        self._engine = engine
        self._admin_token = admin_token
        self.ttl_s = ttl_s
        self._known: dict[str, tuple[Principal | None, float]] = {}  # token hash → (principal, checked at)
        self.database_ok = True

    async def principal(self, token: str) -> Principal | None:
        """The token's principal; None for a wrong or revoked token. Raises :class:`TokensUnavailable`."""
        if self._admin_token and hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return Principal("admin", "admin")
        digest = db.hash_token(token)
        cached = self._known.get(digest)
        now = time.monotonic()
        if cached is not None:
            principal, at = cached
            if now - at < (self.ttl_s if principal is not None else NEGATIVE_TTL_S):
                return principal
        try:
            principal = await asyncio.to_thread(self._lookup, token)
        except Exception as exc:
            if self.database_ok:
                _log.error("gateway.tokens_unavailable", error=str(exc).splitlines()[0][:200])
            self.database_ok = False
            if cached is not None and cached[0] is not None:
                return cached[0]  # known before: keep serving while the database is down
            raise TokensUnavailable("the token cannot be checked now (metadata database unavailable); retry") from None
        if not self.database_ok:
            _log.info("gateway.tokens_recovered")
        self.database_ok = True
        if len(self._known) > 100_000:
            self._known.clear()
        self._known[digest] = (principal, now)
        return principal

    def known(self, token: str) -> Principal | None:
        """The token's principal if it is the admin token or checked valid within the cache's
        bound, without asking the database; else None."""
        if self._admin_token and hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return Principal("admin", "admin")
        cached = self._known.get(db.hash_token(token))
        if cached is None or cached[0] is None or time.monotonic() - cached[1] >= self.ttl_s:
            return None
        return cached[0]

    def _lookup(self, token: str) -> Principal | None:
        with db.session(self._engine) as s:
            row = db.find_token(s, token)
            if row is None:
                return None
            return Principal(row.name, row.scope, tuple(row.topics or ()))
