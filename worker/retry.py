"""Retry policy: what to do after each push attempt (docs/contract.md §4). Pure: no I/O.

- 2xx: acknowledged.
- 429 and 503: retry after ``Retry-After`` (seconds or an HTTP date) when given, else backoff.
- 408, other 5xx, timeouts, connection errors, refused addresses: retry with backoff.
- Any other status (other 4xx, 1xx, 3xx — redirects are not followed): dead-letter at once.
- After ``max_attempts`` pushes (every push counts, a 429 included) the record is dead-lettered.

Backoff is exponential with full jitter: a random delay in [0, min(max, initial * 2^(n-1))],
so many keys failing together do not retry in lock-step. ``Retry-After`` is capped by the
backoff maximum, so an endpoint cannot park a key for hours.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal

from ferry.digits import ascii_digits
from ferry.subscription import RetryPolicySpec

Action = Literal["ack", "retry", "dead_letter"]
HONOUR_RETRY_AFTER = frozenset({429, 503})
RETRYABLE_4XX = frozenset({408, 429})


@dataclass(frozen=True)
class Decision:
    action: Action
    delay_s: float = 0.0
    reason: str = ""


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header, or None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if ascii_digits(value):
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now_s)


class RetryPolicy:
    def __init__(self, spec: RetryPolicySpec, rng: random.Random | None = None) -> None:
        self.spec = spec
        self._rng = rng or random.Random()

    def backoff_s(self, attempt: int) -> float:
        """Full-jitter delay after the ``attempt``-th failed push (1-based)."""
        cap_ms = min(self.spec.max_backoff_ms, self.spec.initial_backoff_ms * 2 ** min(attempt - 1, 40))
        return self._rng.uniform(0, cap_ms) / 1000.0

    def after_status(self, attempt: int, status: int, retry_after_s: float | None = None) -> Decision:
        if 200 <= status < 300:
            return Decision("ack")
        retryable = status >= 500 or status in RETRYABLE_4XX
        if not retryable:
            return Decision("dead_letter", reason=f"endpoint answered {status}")
        return self._retry(
            attempt, f"endpoint answered {status}", retry_after_s if status in HONOUR_RETRY_AFTER else None
        )

    def after_error(self, attempt: int, error: str) -> Decision:
        """A timeout, connection error or refused address: always retryable."""
        return self._retry(attempt, error, None)

    def _retry(self, attempt: int, reason: str, retry_after_s: float | None) -> Decision:
        if attempt >= self.spec.max_attempts:
            return Decision("dead_letter", reason=f"{reason}; gave up after {attempt} attempts")
        if retry_after_s is not None:
            delay = min(retry_after_s, self.spec.max_backoff_ms / 1000.0)
        else:
            delay = self.backoff_s(attempt)
        return Decision("retry", delay_s=delay, reason=reason)
