"""Watermark stall: how long one record has been holding a partition's progress.

Use case: a partition's committed watermark moves only when its lowest unacknowledged record is
settled. A record the endpoint keeps failing (retries with backoff, then a dead-letter write
that Kafka does not confirm), or pushes that cannot start (the lease lost), hold it while the
records above are pushed and acknowledged. Consumer lag says the partition is behind, not why;
a lag that grows because traffic outruns the endpoint looks the same. The stall says it: the
seconds during which there was work to do and the watermark did not move. It stays near zero
under any load while records are settled, and grows only while the head is held. It is what a
head-of-line alert watches (``ferry_watermark_stalled_seconds``, docs/operations.md).

States: idle (nothing to do: 0) → moving (work, the watermark moved since the last look: 0,
the clock restarts) → held (work, same watermark: seconds since the clock started). A paused
subscription counts as idle: holding its records is what was asked for.

Pure: the caller passes the time, sampled as often as it likes (the worker: at every offset
flush), so the figure's resolution is the sampling interval.
"""

from __future__ import annotations


class Stall:
    __slots__ = ("_committed", "_since")

    def __init__(self) -> None:
        self._committed: int | None = None
        self._since: float | None = None

    def observe(self, committed: int | None, working: bool, now: float) -> float:
        """Seconds the watermark ``committed`` has been held while ``working`` (records
        unacknowledged at or above it, buffered or in flight), as of ``now``."""
        if committed is None or not working:
            self._committed, self._since = committed, None
            return 0.0
        if self._since is None or committed != self._committed:
            self._committed, self._since = committed, now
            return 0.0
        return now - self._since
