"""Adaptive concurrency: how many pushes one endpoint should have in flight, learned from it.

Use case: a fixed ``max_in_flight`` is a guess. Too low starves a fast endpoint; too high pushes a
struggling one into timeouts, retries and duplicates exactly when it is weakest. The limiter
watches each push's latency and answer and moves the limit so that the endpoint is kept busy
without a queue building up in front of it. One limiter serves one endpoint origin and is shared by
every partition a worker pushes there (the caller splits it fairly between partitions).

The model (gradient, as in Netflix's Gradient2, with the no-queue latency measured as Envoy does):

- *no-queue latency*: measured in a *probe*, at the start and then at every multiple of
  ``probe_every_s`` on the wall clock: the pushes allowed in flight drop to ``min_limit`` until
  ``probe_samples`` pushes sent that way have answered (or one has, after ``interval_s``), and the
  lowest latency of their 2xx answers is the no-queue latency until the next probe (a lower latency
  seen meanwhile lowers it). A probe whose pushes all failed (error statuses, timeouts) keeps the
  no-queue latency it had, so an endpoint answering only errors is not held at ``min_limit``, which
  would slow its records' way to the dead-letter topic (while learning, the limit stays at
  ``initial_limit``, unadjusted, until a probe at a later mark sees a 2xx). Latencies seen while the
  limit is in use cannot tell it: once the limiter keeps a queue, every push waits in it, so their
  minimum would rise with the queue, the limit with it, and so on without end. On the wall clock's
  marks, every worker pushing to the endpoint probes at once, so its queue really drains (a worker
  probing alone would measure the others' queue). A probe costs one drain of the endpoint's queue
  and a few pushes at ``min_limit``; the other pushes wait for it in the worker, nothing is refused;
- every ``interval_s`` with samples, outside probes:
  ``gradient = clamp(tolerance × no-queue latency / median, 0.5, 1)``;
  ``limit ← limit × gradient + growth`` when the endpoint was the bottleneck (in flight reached
  most of the limit), else unchanged (an idle sender must not raise the limit it never used); the
  result is smoothed and kept within [min, max]. ``growth`` is √limit (the queue the limiter
  keeps probing with, which stops latency noise from collapsing the limit), but at most a quarter
  of the limit and at least 1: at small limits √limit would be a queue as long as the endpoint's
  capacity, doubling every push's latency;
- *sharing*: when ``sharing`` workers push to the endpoint (the coordinator counts them from its
  partition plan), each worker's growth is the growth of their limits together, divided among
  them: ``growth(limit × sharing) / sharing``. Each worker keeping its own queue of ``growth``
  would otherwise queue ``sharing`` times as much at the endpoint as one worker does (four workers
  on an endpoint of 4 slots: limits adding up to 8, p99 4× the unloaded latency). When the count
  changes, every worker of the origin is told at about the same moment (one write of the
  leader's), and each probes at the wall-clock moment given with the count (:meth:`share`), a
  worker that has just started included: else its first probe would measure the others' queue,
  and it would grow beyond its share until the next mark;
- overload (429, 503, a timeout) cuts the limit at once by ``backoff_ratio``, at most once per
  interval (one burst of 503s is one signal, not fifty).

States: *probing* (the first one is learning: no no-queue latency yet) → *adapting* → probing
again at the next mark → adapting with the new no-queue latency. ``limit`` is the learned
limit; ``allowed`` is what may be in flight now (``min_limit`` while probing). Pure: the caller
passes the time; no I/O, no clock (``wall_offset_s`` turns the caller's time into the wall clock's).
"""

from __future__ import annotations

import math
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
    probe_every_s: float = 30.0  # the no-queue latency is measured again at these wall-clock marks
    probe_samples: int = 3  # answers at min_limit that end a probe (or one, after interval_s)
    busy_fraction: float = 0.8  # grow only when in flight reached 80 % of the limit


@dataclass
class AdaptiveLimit:
    settings: LimiterSettings = field(default_factory=LimiterSettings)
    limit_f: float = 0.0
    _samples: list[float] = field(default_factory=list)
    _busy: bool = False
    _interval_start: float | None = None
    _baseline: float | None = None
    _probe_start: float | None = None  # when the probe began (learning: at the first answer)
    _probing: bool = True
    _probe_samples: list[float] = field(default_factory=list)
    _probe_answers: int = 0  # answers to pushes sent during the probe, 2xx or not
    _last_probe: float | None = None
    wall_offset_s: float = 0.0  # the wall clock minus the time passed in
    sharing: int = 1  # the workers pushing to the endpoint, this one included
    _probe_at: float | None = None  # a probe due then (the caller's time), told with the count
    _last_cut: float | None = None

    def __post_init__(self) -> None:
        s = self.settings
        if not 1 <= s.min_limit <= s.max_limit:
            raise ValueError(f"concurrency limits must satisfy 1 <= min ({s.min_limit}) <= max ({s.max_limit})")
        if s.probe_samples < 1:
            raise ValueError(f"probe_samples must be at least 1, not {s.probe_samples}")
        self.limit_f = float(min(max(s.initial_limit, s.min_limit), s.max_limit))

    @property
    def limit(self) -> int:
        """The learned limit."""
        return max(self.settings.min_limit, int(self.limit_f))

    @property
    def allowed(self) -> int:
        """How many pushes may be in flight now: ``min_limit`` while probing, else the limit."""
        return self.settings.min_limit if self._probing else self.limit

    @property
    def probing(self) -> bool:
        return self._probing

    @property
    def baseline_s(self) -> float | None:
        """The no-queue latency, None until a probe has seen a 2xx answer."""
        return self._baseline

    def share(self, sharing: int, probe_at_wall: float | None, now: float) -> None:
        """``sharing`` workers push to the endpoint now; with ``probe_at_wall`` (the wall clock),
        probe then: the others told the same count probe at the same moment."""
        self.sharing = max(1, sharing)
        if probe_at_wall is not None and self.settings.min_limit < self.settings.max_limit:
            at = probe_at_wall - self.wall_offset_s
            if at > now:
                self._probe_at = at

    def on_sample(self, latency_s: float, in_flight: int, now: float) -> None:
        """A push was answered with a 2xx after ``latency_s``, with ``in_flight`` pushes outstanding
        when it was sent (itself included)."""
        if self._probing:
            self._probe(latency_s, in_flight, now)
            return
        if self._baseline is not None and latency_s < self._baseline:
            self._baseline = latency_s
        if self._probe_due(now):
            self._start_probe(now)
            return
        self._roll(now)
        self._samples.append(latency_s)
        if in_flight >= self.settings.busy_fraction * self.limit:
            self._busy = True

    def on_error(self, in_flight: int, now: float) -> None:
        """A push ended without a sample (an error status, a timeout, a refused connection), with
        ``in_flight`` pushes outstanding when it was sent: while probing, it is one of the answers."""
        if self._probing:
            self._probe(None, in_flight, now)

    def on_overload(self, now: float) -> None:
        """The endpoint said it is overloaded (429/503) or a push timed out."""
        s = self.settings
        if self._last_cut is not None and now - self._last_cut < s.interval_s:
            return
        self._last_cut = now
        self.limit_f = max(float(s.min_limit), self.limit_f * s.backoff_ratio)

    def _probe_due(self, now: float) -> bool:
        """A mark of the wall clock (a multiple of ``probe_every_s``) passed since the last probe,
        or the moment told with the count of workers came."""
        if self._probe_at is not None and now >= self._probe_at:
            self._probe_at = None
            return True
        if self._last_probe is None:
            return False
        every, offset = self.settings.probe_every_s, self.wall_offset_s
        return (now + offset) // every > (self._last_probe + offset) // every

    def _start_probe(self, now: float) -> None:
        if self.settings.min_limit == self.settings.max_limit:
            self._last_probe = now  # nothing to adapt: no probe
            return
        self._probing, self._probe_start, self._probe_samples, self._probe_answers = True, now, [], 0

    def _probe(self, latency_s: float | None, in_flight: int, now: float) -> None:
        """One answer while probing: a 2xx answer's latency, or None for an error."""
        s = self.settings
        if self._probe_start is None:
            self._probe_start = now  # learning starts with the first answer
        if in_flight > s.min_limit:
            return  # sent before the probe, behind a queue of the worker's own
        if self._probe_at is not None:  # to be measured from the moment told with the count on
            sent = now if latency_s is None else now - latency_s
            if sent < self._probe_at:
                return  # the other workers may still keep a queue
            self._probe_at, self._probe_start = None, now
        self._probe_answers += 1
        if latency_s is not None:
            self._probe_samples.append(latency_s)
        enough = self._probe_answers >= s.probe_samples
        if not enough and now - self._probe_start < s.interval_s:
            return
        if self._probe_samples:
            self._baseline = min(self._probe_samples)
        self._probing, self._last_probe = False, now
        self._samples, self._busy, self._interval_start = [], False, now

    def _roll(self, now: float) -> None:
        if self._interval_start is None:
            self._interval_start = now
            return
        if now - self._interval_start < self.settings.interval_s:
            return
        if self._samples:
            self._adjust()
        self._samples, self._busy, self._interval_start = [], False, now

    def _adjust(self) -> None:
        s = self.settings
        if not self._busy or self._baseline is None:
            return
        samples = sorted(self._samples)
        median = samples[len(samples) // 2]
        gradient = 1.0 if median <= 0 else min(1.0, max(0.5, s.tolerance * self._baseline / median))
        n = max(1, self.sharing)
        target = self.limit_f * gradient + growth(self.limit_f * n) / n
        new = (1 - s.smoothing) * self.limit_f + s.smoothing * target
        self.limit_f = min(float(s.max_limit), max(float(s.min_limit), new))


def growth(limit: float) -> float:
    """How far above ``limit × gradient`` an interval's target goes: the probe that keeps a small
    queue in front of the endpoint (√limit), at most a quarter of the limit, at least 1."""
    return max(1.0, min(math.sqrt(limit), limit / 4))
