"""An idempotent Kafka producer whose deliveries can be awaited from asyncio.

One per worker, shared by the offset store and the dead-letter sink. A daemon thread serves
librdkafka's delivery reports and resolves the matching futures on the event loop, so a
dead-lettered record counts as acknowledged only once the broker confirmed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Message

from ferry import kafka
from ferry.errors import FerryError

PURGED_REPORTS_S = 1.0
"""After a purge, how long closing waits for librdkafka to hand back the purged records' reports."""


class ProduceFailed(FerryError):
    """The broker did not confirm a produced record."""


class AsyncProducer:
    def __init__(self, client_config: Mapping[str, Any]) -> None:
        cfg = dict(client_config)
        cfg.update(
            {
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # Same partition for the same key as the Java clients, so offset records of one key
                # always land in one partition whichever client wrote them.
                "partitioner": "murmur2_random",
                "message.max.bytes": max(int(cfg.get("message.max.bytes", 0) or 0), 16 * 1024 * 1024),
            }
        )
        self._producer = kafka.producer(cfg, "producer")  # its log lines come with _serve's polls
        self._running = True
        self._thread = threading.Thread(target=self._serve, name="ferry-producer", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self._running:
            self._producer.poll(0.1)

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
    ) -> tuple[int, int]:
        """Produce and wait for the broker's confirmation (to ``partition``, or the key's); where
        the record was written: its partition and offset."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[tuple[int, int]] = loop.create_future()

        def done(err: KafkaError | None, msg: Message) -> None:
            written = (msg.partition(), msg.offset())  # read in the poll thread, as reported

            def settle() -> None:
                if fut.done():
                    return
                if err is None:
                    fut.set_result(cast(tuple[int, int], written))
                else:
                    fut.set_exception(ProduceFailed(f"producing to {topic!r} failed: {err.str()}"))

            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits for this record
                loop.call_soon_threadsafe(settle)

        self.produce(topic, value, key, headers, done, partition)
        return await fut

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        on_delivery: Any = None,
        partition: int | None = None,
    ) -> None:
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=list(headers or []), on_delivery=on_delivery, **extra
                )
                return
            except BufferError:
                # Local queue full: let delivery reports drain it, then try again.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise ProduceFailed(f"producing to {topic!r} failed: {exc}") from None

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries; returns how many are still unconfirmed."""
        return int(self._producer.flush(timeout_s))

    def close(self, timeout_s: float = 10.0) -> int:
        """Wait up to ``timeout_s`` for outstanding deliveries, then purge whatever is left, so
        closing never waits on an unreachable broker (librdkafka would retry each record for
        ``message.timeout.ms``, 5 minutes). A purged record's sender gets :class:`ProduceFailed`:
        it is never reported as confirmed. Returns how many records were purged."""
        left = self.flush(timeout_s)
        if left:
            self._producer.purge(in_queue=True, in_flight=True)
            # Serve the purged records' delivery reports (each a failure) while the loop still runs.
            self._producer.flush(PURGED_REPORTS_S)
        self._running = False
        self._thread.join(timeout=2)
        return left
