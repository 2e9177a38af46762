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

Reporting: a stall is worth one log line when it passes a threshold and one when it ends, not
one per sample; :meth:`Stall.report` says which, given the threshold.

Pure: the caller passes the time, sampled as often as it likes (the worker: at every offset
flush), so the figure's resolution is the sampling interval.
"""

from __future__ import annotations

from typing import Literal


class Stall:
    __slots__ = ("_committed", "_reported", "_since", "held_s", "longest_s")

    def __init__(self) -> None:
        self._committed: int | None = None
        self._since: float | None = None
        self._reported = False
        self.held_s = 0.0  # as of the last observation
        self.longest_s = 0.0  # the stall under way, or the last one once the watermark moved

    def observe(self, committed: int | None, working: bool, now: float) -> float:
        """Seconds the watermark ``committed`` has been held while ``working`` (records
        unacknowledged at or above it, buffered or in flight), as of ``now``."""
        if committed is None or not working:
            self._committed, self._since = committed, None
            self.held_s = 0.0
        elif self._since is None or committed != self._committed:
            self._committed, self._since = committed, now
            self.held_s = 0.0
        else:
            self.held_s = now - self._since
        if self.held_s:
            self.longest_s = self.held_s  # it only grows while the watermark is held
        return self.held_s

    def report(self, threshold_s: float) -> Literal["began", "ended"] | None:
        """After an observation: ``"began"`` the first time the stall reaches ``threshold_s``,
        ``"ended"`` at the first observation without a stall after that, else None."""
        if self.held_s >= threshold_s and not self._reported:
            self._reported = True
            return "began"
        if self._reported and not self.held_s:
            self._reported = False
            return "ended"
        return None
