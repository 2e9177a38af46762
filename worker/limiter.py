"""Adaptive concurrency: how many pushes one endpoint should have in flight, learned from it.

Use case: a fixed ``max_in_flight`` is a guess. Too low starves a fast endpoint; too high pushes a
struggling one into timeouts, retries and duplicates exactly when it is weakest. The limiter
watches each push's latency and answer and moves the limit so that the endpoint is kept busy
without a queue building up in front of it. One limiter serves one endpoint origin and is shared by
every partition a worker pushes there (the caller splits it fairly between partitions).

The model (gradient, as in Netflix's Gradient2, with the fixes its users asked for):

- *no-queue latency*: the lowest latency seen over the last ``baseline_window_s`` seconds, kept as
  per-interval minima so that it can rise when the endpoint really became slower — it is never
  re-measured by pinning concurrency low (Envoy's way, which causes 503s), and it is unknown (no
  adaptation) until the first interval has samples (an empty window never reads as 0);
- every ``interval_s`` with samples: ``gradient = clamp(tolerance × baseline / median, 0.5, 1)``;
  ``limit ← limit × gradient + growth`` when the endpoint was the bottleneck (in flight reached
  most of the limit), else unchanged (an idle sender must not raise the limit it never used); the
  result is smoothed and kept within [min, max]. ``growth`` is √limit (the queue the limiter
  keeps probing with, which stops latency noise from collapsing the limit), but at most a quarter
  of the limit and at least 1: at small limits √limit would be a queue as long as the endpoint's
  capacity, doubling every push's latency;
- overload (429, 503, a timeout) cuts the limit at once by ``backoff_ratio``, at most once per
  interval (one burst of 503s is one signal, not fifty).

States: *learning* (no baseline yet: the limit stays at its start), *adapting*. Pure: the caller
passes the time; no I/O, no clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class LimiterSettings:
    """How an adaptive limit moves (docs/delivery.md, "Adaptive concurrency")."""

    min_limit: int = 1
    max_limit: int = 100  # the subscription's max_in_flight bounds it
    initial_limit: int = 8
    interval_s: float = 0.25  # one adjustment per interval with samples
    tolerance: float = 1.25  # latency up to 1.25 × the no-queue latency counts as no queue
    smoothing: float = 0.5  # weight of the new value
    backoff_ratio: float = 0.7  # overload: limit × 0.7
    baseline_window_s: float = 30.0
    busy_fraction: float = 0.8  # grow only when in flight reached 80 % of the limit


@dataclass
class AdaptiveLimit:
    settings: LimiterSettings = field(default_factory=LimiterSettings)
    limit_f: float = 0.0
    _samples: list[float] = field(default_factory=list)
    _busy: bool = False
    _interval_start: float | None = None
    _minima: deque[tuple[float, float]] = field(default_factory=deque)  # (interval start, min latency)
    _baseline: float | None = None  # min of _minima, kept as they change (read at every push's end)
    _last_cut: float | None = None

    def __post_init__(self) -> None:
        s = self.settings
        if not 1 <= s.min_limit <= s.max_limit:
            raise ValueError(f"concurrency limits must satisfy 1 <= min ({s.min_limit}) <= max ({s.max_limit})")
        self.limit_f = float(min(max(s.initial_limit, s.min_limit), s.max_limit))

    @property
    def limit(self) -> int:
        return max(self.settings.min_limit, int(self.limit_f))

    @property
    def baseline_s(self) -> float | None:
        """The no-queue latency, None while learning."""
        return self._baseline

    def on_sample(self, latency_s: float, in_flight: int, now: float) -> None:
        """A push answered (any answer that is not overload) after ``latency_s``, with ``in_flight``
        pushes outstanding when it was sent (itself included)."""
        self._roll(now)
        self._samples.append(latency_s)
        if in_flight >= self.settings.busy_fraction * self.limit:
            self._busy = True

    def on_overload(self, now: float) -> None:
        """The endpoint said it is overloaded (429/503) or a push timed out."""
        s = self.settings
        if self._last_cut is not None and now - self._last_cut < s.interval_s:
            return
        self._last_cut = now
        self.limit_f = max(float(s.min_limit), self.limit_f * s.backoff_ratio)

    def _roll(self, now: float) -> None:
        s = self.settings
        if self._interval_start is None:
            self._interval_start = now
            return
        if now - self._interval_start < s.interval_s:
            return
        if self._samples:
            self._adjust(self._interval_start)
        self._samples, self._busy, self._interval_start = [], False, now
        if self._minima and now - self._minima[0][0] > s.baseline_window_s:
            while self._minima and now - self._minima[0][0] > s.baseline_window_s:
                self._minima.popleft()
            self._baseline = min(m for _, m in self._minima) if self._minima else None

    def _adjust(self, start: float) -> None:
        s = self.settings
        samples = sorted(self._samples)
        self._minima.append((start, samples[0]))
        self._baseline = baseline = samples[0] if self._baseline is None else min(self._baseline, samples[0])
        if not self._busy:
            return
        median = samples[len(samples) // 2]
        gradient = 1.0 if median <= 0 else min(1.0, max(0.5, s.tolerance * baseline / median))
        target = self.limit_f * gradient + growth(self.limit_f)
        new = (1 - s.smoothing) * self.limit_f + s.smoothing * target
        self.limit_f = min(float(s.max_limit), max(float(s.min_limit), new))


def growth(limit: float) -> float:
    """How far above ``limit × gradient`` an interval's target goes: the probe that keeps a small
    queue in front of the endpoint (√limit), at most a quarter of the limit, at least 1."""
    return max(1.0, min(math.sqrt(limit), limit / 4))
