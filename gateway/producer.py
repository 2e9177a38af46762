"""The gateway's one Kafka producer, seen from asyncio: send a record, await its acknowledgement.

Use case: every request handler of the gateway sends its records here and awaits them all before
it answers 200, so a 200 means every record is acknowledged by the brokers (``acks=all``,
idempotent: a retried produce inside librdkafka never duplicates or reorders a partition's records).

How it stays fast and bounded:

- Records of all concurrent requests go into one librdkafka producer, which batches them per
  partition (``linger.ms``): there is no flush per request.
- One thread polls the producer; acknowledgements are collected per poll and handed to the event
  loop in one call, not one wake-up per record.
- Bytes sent and not yet acknowledged are counted; past ``max_in_flight_bytes`` — or while the
  brokers are unreachable — :meth:`Producer.send` raises :class:`Busy` at once, and the request is
  answered 503 with ``Retry-After`` instead of waiting: memory stays bounded whatever the load,
  and clients are not left hanging.
- A record not acknowledged within ``produce_timeout_ms`` fails with a timeout (librdkafka's
  ``message.timeout.ms``); its request says so for that record.

States: ``up`` (sending) ⇄ ``down`` (librdkafka reported all brokers down; until a record is
acknowledged again, or 5 s pass, sends are refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Message

from ferry import kafka, log
from ferry.errors import FerryError
from ferry.gateway.records import Outgoing

_log = log.get_logger(__name__)
DOWN_RECHECK_S = 5.0


class Busy(FerryError):
    """Kafka cannot take records now; ``retry_after_s`` says when to try again."""

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Producer:
    def __init__(
        self,
        client_config: Mapping[str, Any],
        *,
        max_in_flight_bytes: int,
        produce_timeout_ms: int,
        linger_ms: int = 5,
    ) -> None:
        self.max_in_flight_bytes = max_in_flight_bytes
        self.in_flight_bytes = 0
        self._down_since: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._acked: list[tuple[asyncio.Future[tuple[int, int]], KafkaError | None, int, int, int]] = []
        self._acked_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rebuild = False
        self._swap = threading.Lock()
        self._config = {
            **client_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "message.timeout.ms": produce_timeout_ms,
            "queue.buffering.max.kbytes": max(1024, max_in_flight_bytes // 1024 * 2),
            "queue.buffering.max.messages": 1_000_000,
            "error_cb": self._on_error,
        }
        self._p = kafka.producer(self._config, "gateway")

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._poll_forever, name="ferry-gateway-producer", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> int:
        """Flush what is queued (bounded), stop polling; returns records left unacknowledged."""
        left = self._p.flush(timeout_s)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return int(left)

    @property
    def down(self) -> bool:
        if self._down_since is None:
            return False
        if time.monotonic() - self._down_since > DOWN_RECHECK_S:
            self._down_since = None  # try again: a refused request costs nothing, a stuck flag everything
            return False
        return True

    # --- sending ----------------------------------------------------------------------------

    def send(self, rec: Outgoing, topic: str | None = None) -> asyncio.Future[tuple[int, int]]:
        """Queue one record; the future resolves to (partition, offset) once the brokers acknowledged
        it, or fails with :class:`KafkaException`. Raises :class:`Busy` when Kafka cannot take it now."""
        if self.down:
            raise Busy("Kafka brokers are unreachable from the gateway; retry shortly", retry_after_s=2)
        size = rec.size
        if self.in_flight_bytes + size > self.max_in_flight_bytes and self.in_flight_bytes > 0:
            raise Busy(
                f"the gateway holds {self.in_flight_bytes:,} bytes not yet acknowledged by Kafka "
                f"(FERRY_GATEWAY_MAX_IN_FLIGHT_BYTES={self.max_in_flight_bytes:,}); retry shortly"
            )
        assert self._loop is not None, "Producer.start() was not called"
        fut: asyncio.Future[tuple[int, int]] = self._loop.create_future()

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            with self._acked_lock:
                self._acked.append((fut, err, msg.partition() or 0, msg.offset() or 0, size))

        kwargs: dict[str, Any] = {}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        try:
            with self._swap:
                self._p.produce(
                    topic or rec.topic,
                    value=rec.value,
                    key=rec.key,
                    headers=cast(Any, rec.headers),
                    on_delivery=on_delivery,
                    **kwargs,
                )
        except BufferError:
            raise Busy("the gateway's Kafka queue is full; retry shortly") from None
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.fatal():
                self._rebuild = True
            raise Busy(
                f"Kafka refused the record now ({err.str() if isinstance(err, KafkaError) else exc}); retry"
            ) from None
        self.in_flight_bytes += size
        return fut

    # --- the polling thread -----------------------------------------------------------------

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            if self._rebuild:
                self._replace()
            try:
                self._p.poll(0.05)
            except KafkaException as exc:  # a fatal error surfaces here too: replace, never die
                _log.warning("gateway.producer_error", error=str(exc)[:300])
                self._rebuild = True
            with self._acked_lock:
                acked, self._acked = self._acked, []
            if acked and self._loop is not None:
                try:
                    self._loop.call_soon_threadsafe(self._settle, acked)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    return

    def _settle(self, acked: list[tuple[asyncio.Future[tuple[int, int]], KafkaError | None, int, int, int]]) -> None:
        for fut, err, partition, offset, size in acked:
            self.in_flight_bytes -= size
            if fut.done():
                continue
            if err is None:
                self._down_since = None
                fut.set_result((partition, offset))
            else:
                if err.code() == KafkaError._MSG_TIMED_OUT and not self._rebuild:
                    # Not acknowledged in produce_timeout_ms: a cluster that restarted without our
                    # producer's state never will; a fresh producer (new producer id) recovers.
                    self._rebuild = True
                fut.set_exception(KafkaException(err))

    def _replace(self) -> None:
        """The idempotent producer hit a fatal error (e.g. the brokers lost its producer state, as a
        restarted cluster does): records still queued in it fail (their requests say so), and a new
        producer takes its place."""
        with self._swap:
            old, self._p = self._p, kafka.producer(self._config, "gateway")
            self._rebuild = False
        for step in (old.purge, lambda: old.poll(0), lambda: old.flush(0)):  # purged records fail
            with contextlib.suppress(KafkaException):
                step()
        _log.warning("gateway.producer_replaced", reason="fatal idempotent-producer error")

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._rebuild = True
            return
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if self._down_since is None:
                _log.warning("gateway.kafka_down", error=err.str())
            self._down_since = time.monotonic()
