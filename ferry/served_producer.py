"""A Kafka producer served by a thread of its own, whose acknowledgements settle asyncio futures.

Use case: code on an event loop writes a few records and waits for each one's acknowledgement
(the transaction log, the gateway's idempotency keys). Polling the producer from the loop would
either block it or wait on a timer; here one thread polls, and concurrent writers share the
producer's batches instead of taking turns polling it.

States of an acknowledgement: queued in librdkafka → served by a poll (the delivery callback
runs on the poll thread and queues the result) → handed to its loop after that poll → settled
there. Every acknowledgement one poll serves wakes each waiting loop once, not once per record.
An acknowledgement whose loop has closed is dropped: nobody waits for it any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, Message

from ferry import kafka
from ferry.deadlines import time_out

POLL_S = 0.05
"""How long one poll waits for an acknowledgement (also how soon ``close()`` stops the thread)."""

OnDelivery = Callable[[KafkaError | None, Message], None]
Acked = tuple[KafkaError | None, int, int]
"""An acknowledgement as its future gives it: (error or None, partition, offset)."""


class ServedProducer:
    def __init__(self, client_config: Mapping[str, Any], role: str) -> None:
        self.producer = kafka.producer(client_config, role)
        self._due: deque[tuple[asyncio.AbstractEventLoop, Callable[..., None], tuple[Any, ...]]] = deque()
        self._running = True
        self._thread = threading.Thread(target=self._poll, name=f"ferry-{role}-poll", daemon=True)
        self._thread.start()

    def acknowledgement(
        self, timeout_s: float | None = None, delivered: Callable[[], None] | None = None
    ) -> tuple[asyncio.Future[Acked], OnDelivery]:
        """(On the loop.) A future of one record's acknowledgement, and the delivery callback to
        produce it with; the future raises :class:`TimeoutError` if ``timeout_s`` passes first
        (:func:`ferry.deadlines.time_out`: no timer of its own). ``delivered`` runs on the loop
        once librdkafka has reported the record, also after the future timed out."""
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[Acked] = loop.create_future()
        if timeout_s is not None:
            time_out(acked, timeout_s)

        def settle(err: KafkaError | None, partition: int, offset: int) -> None:
            if not acked.done():
                acked.set_result((err, partition, offset))
            if delivered is not None:
                delivered()

        def on_delivery(err: KafkaError | None, msg: Message) -> None:  # the poll thread
            self.later(loop, settle, err, msg.partition(), msg.offset())

        return acked, on_delivery

    def later(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
        """(In a delivery callback, on the poll thread.) Run ``fn(*args)`` on ``loop`` once this
        poll is over, together with the poll's other acknowledgements for that loop."""
        self._due.append((loop, fn, args))

    def close(self, flush_timeout_s: float) -> None:
        """Flush what is queued (its acknowledgements are still handed over), then stop the thread."""
        self.producer.flush(flush_timeout_s)
        self._hand_over()
        self._running = False
        self._thread.join(1.0)

    def _poll(self) -> None:
        while self._running:
            self.producer.poll(POLL_S)
            if self._due:
                self._hand_over()

    def _hand_over(self) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Callable[..., None], tuple[Any, ...]]]] = {}
        while self._due:
            loop, fn, args = self._due.popleft()
            by_loop.setdefault(loop, []).append((fn, args))
        for loop, calls in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_run_all, calls)


def _run_all(calls: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
    for fn, args in calls:
        fn(*args)
