"""Catalog: the subscriptions the leader plans for, read from the metadata database and cached.

Use case: the database is the registry, but delivery must not depend on it. The catalog keeps
the last good list: a database outage is logged (one error line when it starts, one when it
ends) and planning goes on with what was last read. ``invalidate()`` (the portal touched
``subscriptions-changed``) makes the next ``get()`` read again at once.
"""

from __future__ import annotations

import time

from sqlalchemy.engine import Engine

from ferry import db, log
from ferry.subscription import Subscription

_log = log.get_logger(__name__)


class Catalog:
    def __init__(self, db_url: str, poll_ms: int) -> None:
        self._url = db_url
        self._poll_s = poll_ms / 1000
        self._engine: Engine | None = None
        self._subs: list[Subscription] | None = None
        self._read_at = 0.0
        self._stale = True
        self.failing = False

    def invalidate(self) -> None:
        self._stale = True

    def get(self) -> list[Subscription] | None:
        """The subscriptions, or None if the database was never readable since start."""
        if self._stale or time.monotonic() - self._read_at >= self._poll_s:
            self._read()
        return self._subs

    def _read(self) -> None:
        self._read_at = time.monotonic()
        try:
            if self._engine is None:
                self._engine = db.make_engine(self._url)
            subs = db.load_subscriptions(self._engine)
        except Exception as exc:
            if not self.failing:
                _log.error(
                    "catalog.database_unavailable",
                    error=str(exc).splitlines()[0][:300],
                    keeping=len(self._subs or []),
                    hint="delivery continues with the last known subscriptions; check FERRY_DB_URL and the database",
                )
            self.failing = True
            return
        if self.failing:
            _log.info("catalog.database_recovered", subscriptions=len(subs))
        self.failing = False
        self._stale = False
        self._subs = subs

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
