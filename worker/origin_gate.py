"""One endpoint origin's adaptive in-flight limit, shared fairly by every partition pushing there.

Use case: a subscription with ``"concurrency": {"mode": "adaptive"}`` (docs/delivery.md) lets the
worker learn how many pushes its endpoint takes at once (:class:`ferry.worker.limiter.AdaptiveLimit`)
instead of trusting a guessed ``max_in_flight``. The limit belongs to the endpoint's origin
(scheme, host, port): every partition of every subscription pushing there shares it. A push waits
at :meth:`OriginGate.acquire` while the origin is at its limit; waiting partitions are served in
turn (one push each, round robin), so a hot partition cannot take the whole limit. The partition's
own window still applies first: per-key order and ``max_in_flight`` hold as without the gate.
Other workers pushing to the origin keep limits of their own; :meth:`Gates.share` takes their
count from the assignment, so that the limits grow as one and their probes fall together.

Waiting pushes are started at most one per ``no-queue latency ÷ limit`` (the limit's own pace, to
the millisecond; a pace finer than :data:`PACE_MIN_S` is not kept): answers that come back
together (an endpoint serving its slots in step) would otherwise be followed by pushes that arrive
together, find the slots taken together and wait a whole service time each; spaced, a push waits
only for the next slot to free. A push that finds the origin below its limit with nobody waiting
starts at once.

States of a push here: admitted at once (in flight < limit and nobody waiting) → or waiting in its
partition's queue → admitted in turn when a push of the origin finishes and the pace allows →
released with its latency and answer (429, 503 and a timeout are overload; a 2xx answer's latency is
a sample), which moves the limit; or abandoned (cancelled), which only gives the place back.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any

from ferry.subscription import Subscription, origin
from ferry.worker.limiter import AdaptiveLimit, LimiterSettings

PACE_MIN_S = 0.0002
"""A finer pace (more than 5,000 starts a second) is not kept: at that rate the worker's own event
loop spreads the starts, and timers would only cost it CPU."""
PACE_TICK_S = 0.001
"""The pace's grain: pushes due within a tick start together, and the gate never sets a timer
shorter than one (an event loop's timers are no finer; a shorter one would spin the loop)."""
PACE_SLACK_S = 0.002
"""How far behind its pace the gate may fall and still catch up (a burst of at most this much)."""
INITIAL_LIMIT = 8
"""Where a limit starts once the first probe has measured the no-queue latency (divided among the
workers pushing to the origin)."""
SYNC_EVERY_S = 5.0
"""A probe told with a new count of workers falls on a multiple of this on the wall clock, ..."""
SYNC_LEAD_S = 3.0
"""... at least this long after the count came: a worker that has just started has that long to
make its first push, so that it probes with the others."""


class OriginGate:
    def __init__(
        self,
        settings: LimiterSettings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.limiter = AdaptiveLimit(settings)
        self.in_flight = 0
        self._clock = clock
        self._wall = wall
        self._waiting: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()
        self.overloads = 0
        self._next_start = 0.0  # on the clock: when a waiting push may start next
        self._timer: asyncio.TimerHandle | None = None

    @property
    def limit(self) -> int:
        """The learned limit (what the gauges show)."""
        return self.limiter.limit

    @property
    def allowed(self) -> int:
        """What may be in flight now: the limit, or the limiter's minimum while it probes."""
        return self.limiter.allowed

    @property
    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    async def acquire(self, who: Hashable) -> int:
        """Wait for a place; returns the pushes in flight at the origin with this one."""
        if self.in_flight < self.allowed and not self._waiting:
            self.in_flight += 1
            return self.in_flight
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(who, deque()).append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            queue = self._waiting.get(who)
            if queue is not None and fut in queue:
                queue.remove(fut)
                if not queue:
                    del self._waiting[who]
            elif fut.done() and not fut.cancelled():
                self._release_place()  # admitted just as it was cancelled: give the place back
            raise
        return self.in_flight

    def release(self, latency_s: float, in_flight_at_send: int, status: int | None) -> None:
        """A push to the origin was answered with ``status`` (None: no answer, a timeout or a refused
        connection) after ``latency_s``. 429, 503 and no answer are overload; a 2xx answer's latency
        is a sample; any other answer (a 500 in a millisecond, a 404) tells nothing of how long the
        endpoint takes to serve, so it only gives the place back (and ends a probe as an answer)."""
        now = self._clock()
        self.limiter.wall_offset_s = self._wall() - now  # probes on the wall clock's marks
        if status is not None and 200 <= status < 300:
            self.limiter.on_sample(latency_s, in_flight_at_send, now)
        else:
            if status is None or status in (429, 503):
                self.overloads += 1
                self.limiter.on_overload(now)
            self.limiter.on_error(in_flight_at_send, now)
        self._release_place()

    def share(self, sharing: int, probe_at_wall: float | None) -> None:
        """``sharing`` workers push to the origin; probe at ``probe_at_wall`` if given."""
        now = self._clock()
        self.limiter.wall_offset_s = self._wall() - now
        self.limiter.share(sharing, probe_at_wall, now)

    def abandon(self) -> None:
        """A push ended without an answer of the endpoint's (cancelled): give its place back."""
        self._release_place()

    def _release_place(self) -> None:
        self.in_flight -= 1
        self._admit()

    def _admit(self) -> None:
        """Start waiting pushes while the origin is below its limit, spaced by the limit's pace."""
        baseline = self.limiter.baseline_s
        allowed = self.allowed
        spacing = baseline / allowed if baseline else 0.0
        paced = spacing >= PACE_MIN_S
        while self.in_flight < allowed and self._waiting:
            who, queue = next(iter(self._waiting.items()))
            if paced:
                now = self._clock()
                if now < self._next_start - PACE_TICK_S:
                    if self._timer is None:
                        wait = max(PACE_TICK_S, self._next_start - PACE_TICK_S - now)
                        self._timer = asyncio.get_running_loop().call_later(wait, self._on_timer)
                    return
            fut = queue.popleft()
            if queue:
                self._waiting.move_to_end(who)  # the next partition's turn
            else:
                del self._waiting[who]
            if fut.done():
                continue
            if paced:
                # A late timer is caught up on (timers fire up to ~1 ms late), an idle spell is not.
                on_pace = now - self._next_start <= PACE_SLACK_S
                self._next_start = (self._next_start if on_pace else now) + spacing
            self.in_flight += 1
            fut.set_result(None)

    def _on_timer(self) -> None:
        self._timer = None
        self._admit()

    def stats(self) -> dict[str, Any]:
        baseline = self.limiter.baseline_s
        return {
            "limit": self.limit,
            "probing": self.limiter.probing,
            "in_flight": self.in_flight,
            "waiting": self.waiting,
            "no_queue_latency_ms": None if baseline is None else round(baseline * 1000, 2),
            "overloads": self.overloads,
            "sharing": self.limiter.sharing,
        }


class Gates:
    """The worker's gates, one per endpoint origin of an adaptive subscription."""

    def __init__(
        self, on_new: Callable[[str, OriginGate], None] | None = None, wall: Callable[[], float] = time.time
    ) -> None:
        self._gates: dict[str, OriginGate] = {}
        self._on_new = on_new
        self._wall = wall
        self._sharing: dict[str, int] = {}
        self._probe_at: dict[str, float] = {}  # origin → the wall-clock moment told with its count

    def share(self, sharing: dict[str, int]) -> None:
        """How many workers push to each origin (this one included), from the assignment: each
        gate's limiter grows by its share of their growth together (an origin not named: 1). An
        origin whose count changed is probed at the next :data:`SYNC_EVERY_S` mark at least
        :data:`SYNC_LEAD_S` away, where every worker told the same count probes too."""
        new = {k: max(1, int(n)) for k, n in sharing.items()}
        lead = self._wall() + SYNC_LEAD_S
        mark = (lead // SYNC_EVERY_S + 1) * SYNC_EVERY_S
        for key in new.keys() | self._sharing.keys():
            if new.get(key, 1) != self._sharing.get(key, 1):
                self._probe_at[key] = mark
        self._sharing = new
        for key, gate in self._gates.items():
            if gate.limiter.sharing != new.get(key, 1):
                gate.share(new.get(key, 1), self._probe_at.get(key))

    def for_subscription(self, sub: Subscription) -> OriginGate | None:
        """The gate of ``sub``'s endpoint origin; None unless its concurrency is adaptive."""
        conc = sub.concurrency
        return None if conc is None else self.for_endpoint(sub.endpoint.url, conc.min, conc.max)

    def for_endpoint(self, url: str, min_limit: int, max_limit: int) -> OriginGate:
        key = origin(url)
        gate = self._gates.get(key)
        if gate is None:
            # A worker joining others starts from its share of the usual start, not all of it.
            start = max(1, INITIAL_LIMIT // self._sharing.get(key, 1))
            settings = LimiterSettings(min_limit=min_limit, max_limit=max_limit, initial_limit=min(start, max_limit))
            gate = self._gates[key] = OriginGate(settings, wall=self._wall)
            gate.share(self._sharing.get(key, 1), self._probe_at.get(key))
            if self._on_new is not None:
                self._on_new(key, gate)
        elif max_limit > gate.limiter.settings.max_limit:
            gate.limiter.settings.max_limit = max_limit  # the widest subscription there bounds it
        return gate

    def stats(self) -> dict[str, dict[str, Any]]:
        return {k: g.stats() for k, g in self._gates.items()}
