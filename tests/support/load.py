"""A steady producer for tests that measure delivery during faults: bounded in rate, count and time."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Producer


class Trickle:
    """Produces ``rate`` records/s round-robin over partitions (key ``k<i % keys>``) until stopped
    or ``max_records`` is reached. Remembers every confirmed (partition, offset)."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, rate: float, keys: int = 64, max_records: int = 200_000
    ):
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.keys = keys
        self.max_records = max_records
        self.confirmed: set[tuple[int, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
        self._thread = threading.Thread(target=self._run, daemon=True, name="trickle")

    def _done(self, err: object, msg: object) -> None:
        if err is None:
            with self._lock:
                self.confirmed.add((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    def _run(self) -> None:
        start = time.monotonic()
        i = 0
        while not self._stop.is_set() and i < self.max_records:
            due = start + i / self.rate
            now = time.monotonic()
            if due > now:
                self._stop.wait(due - now)
                continue
            key = i % self.keys
            self._producer.produce(
                self.topic,
                key=f"k{key}".encode(),
                value=str(i).encode(),
                partition=key % self.partitions,
                on_delivery=self._done,
            )
            self._producer.poll(0)
            i += 1
        self._producer.flush(60)
        # Free the client now: a producer left for the garbage collector outlives the broker and logs errors.
        del self._producer

    def start(self) -> Trickle:
        self._thread.start()
        return self

    def confirmed_now(self) -> set[tuple[int, int]]:
        """The records the broker confirmed so far, while producing goes on."""
        with self._lock:
            return set(self.confirmed)

    def finish(self, timeout_s: float = 120.0) -> set[tuple[int, int]]:
        """Let the producer reach ``max_records`` (bounded by ``timeout_s``), then stop it."""
        self._thread.join(timeout_s)
        return self.stop()

    def stop(self) -> set[tuple[int, int]]:
        self._stop.set()
        self._thread.join(60)
        with self._lock:
            return set(self.confirmed)
