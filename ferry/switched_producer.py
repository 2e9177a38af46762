"""Two producers of one log, one of them lingering: writes go out at once while few are waiting,
and in full batches while many are.

Use case: the gateway's transaction log. Each step of a transaction waits for its write, so one
client at a time is fastest with no linger. Under load, though, no linger makes librdkafka send a
produce request for every few entries and wake its thread several times per entry: at 128–256
transactions in flight a gateway spent a quarter of its CPU, and the broker most of its own, on
that (bench/transactions.py). A producer with a linger of a few milliseconds packs dozens of
entries into a request instead. librdkafka cannot change a producer's linger once made, so there
are two producers, and writes switch between them by how many are outstanding.

States::

    quick ──(busy_at writes outstanding)──▶ switching ──(quick's writes all reported)──▶ lingering
      ▲                                                                                   │
      └── (lingering's writes all reported) switching ◀──(idle_at or fewer outstanding)───┘

A switch starts at most once a second (:data:`DWELL_S`). While switching, new writes are held, in
order, and sent through the next producer once librdkafka has reported all of the current one's
writes. So only one producer has writes in flight at any time, and the log stores this
process's writes in the order they were made, on any broker: a broker may append the requests of
two connections concurrently, and store them in another order than their offsets (the embedded
broker does).

A write is in flight until librdkafka reports it, also when its acknowledgement timed out
meanwhile. A held write given up on before its turn is not sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from confluent_kafka import Producer

from ferry.served_producer import Acked, OnDelivery, ServedProducer

DWELL_S = 1.0
"""The least time between two switches. A switch holds the writes made meanwhile for about one
produce request's round trip; a load near the threshold would otherwise switch on every few."""

Produce = Callable[[Producer, OnDelivery], object]
"""Queues one write in the producer given, with that delivery callback; raises if it cannot."""


class SwitchedProducer:
    def __init__(
        self,
        quick: ServedProducer,
        lingering: ServedProducer | None,
        busy_at: int,
        idle_at: int,
        dwell_s: float = DWELL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``lingering`` None: every write goes through ``quick``. A switch starts at most once
        every ``dwell_s``."""
        if not 0 <= idle_at < busy_at:
            raise ValueError(f"idle_at ({idle_at}) must be at least 0 and below busy_at ({busy_at})")
        self.dwell_s = dwell_s
        self._clock = clock
        self._switched_at = -dwell_s
        self.switches = 0
        """Switches started so far (a gauge for the curious: many mean a load near ``busy_at``)."""
        self.quick = quick
        self.lingering = lingering
        self.busy_at = busy_at
        self.idle_at = idle_at
        self.active = quick
        """The producer writes are sent through (the one with writes in flight)."""
        self.next: ServedProducer | None = None
        """While switching: the producer held writes will go through."""
        self._in_flight = 0
        self._held: list[tuple[Produce, asyncio.Future[Acked], OnDelivery]] = []

    @property
    def outstanding(self) -> int:
        """Writes sent and not yet reported by librdkafka, and writes held."""
        return self._in_flight + len(self._held)

    def send(self, produce: Produce, timeout_s: float) -> asyncio.Future[Acked]:
        """(On the loop.) Queue one write; the future of its acknowledgement (which times out
        after ``timeout_s``). A write sent at once raises what ``produce`` raises; a held one's
        failure to be sent is its future's exception."""
        if self.next is None and self.lingering is not None:
            wanted = self._wanted()
            if wanted is not self.active and (now := self._clock()) - self._switched_at >= self.dwell_s:
                self._switched_at = now
                self.switches += 1
                if self._in_flight:
                    self.next = wanted
                else:
                    self.active = wanted
        served = self.next or self.active
        acked, on_delivery = served.acknowledgement(timeout_s, self._delivered)
        if self.next is not None:
            self._held.append((produce, acked, on_delivery))
            return acked
        produce(served.producer, on_delivery)
        self._in_flight += 1
        return acked

    @property
    def lingering_now(self) -> bool:
        """Whether writes go through the lingering producer now (or are held for it)."""
        return self.lingering is not None and (self.next or self.active) is self.lingering

    def _wanted(self) -> ServedProducer:
        n = self.outstanding
        if self.active is self.quick and n >= self.busy_at and self.lingering is not None:
            return self.lingering
        if self.active is not self.quick and n <= self.idle_at:
            return self.quick
        return self.active

    def _delivered(self) -> None:
        self._in_flight -= 1
        if self._in_flight or self.next is None:
            return
        self.active, self.next = self.next, None
        held, self._held = self._held, []
        for produce, acked, on_delivery in held:
            if acked.done():
                continue  # given up on while held: its writer has answered already
            try:
                produce(self.active.producer, on_delivery)
            except Exception as exc:  # as a write sent at once would have raised it
                acked.set_exception(exc)
                continue
            self._in_flight += 1
