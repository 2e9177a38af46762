"""Guessing tokens: a rate limit on wrong ones, per client address.

Use case: the portal and the gateway both take bearer tokens from any client that can reach them.
After ``limit`` wrong tokens within ``window_s`` from one address, that address is refused (429,
``Retry-After``) for ``block_s``, a right token included, so tokens cannot be guessed at speed.
States per address: counting failures → blocked → (after ``block_s``) counting again. A right
token does not clear the count: one client's right tokens (a poller, everyone behind one proxy)
would otherwise let another client at the same address keep guessing in between. Pure: the
caller passes the clock.
"""

from __future__ import annotations


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
