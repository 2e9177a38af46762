"""The gateway's one Kafka producer, seen from asyncio: send a request's records, await their
acknowledgements.

Use case: every request handler of the gateway sends its records here and awaits them all before
it answers 200, so a 200 means every record is acknowledged by the brokers (``acks=all``,
idempotent: a retried produce inside librdkafka never duplicates or reorders a partition's records).

How it stays fast and bounded:

- Records of all concurrent requests go into one librdkafka producer, which batches them per
  partition (``linger.ms``): there is no flush per request. A request's consecutive records for
  one topic with neither headers nor a chosen partition are queued in one call
  (``produce_batch``), which costs librdkafka about half the CPU per record of one ``produce()``
  each; the partitioner, the order and each record's acknowledgement are the same.
- One thread polls the producer; a request's acknowledgements are collected into one list
  (:mod:`ferry.gateway.acks`, in C where built: the callbacks run on that thread with the GIL held,
  so their cost is the event loop's wait) and the requests completed by a poll are handed to the
  event loop in one call: no future, no wake-up per record.
- Bytes sent and not yet acknowledged are counted; past ``max_in_flight_bytes`` — or while the
  brokers are unreachable — :meth:`Producer.send_many` refuses with :class:`Busy` at once, and the
  request is answered 503 with ``Retry-After`` instead of waiting: memory stays bounded whatever
  the load, and clients are not left hanging.
- A request waits at most until its deadline (``produce_timeout_ms`` after it arrived, given to
  :meth:`Producer.watch`): then it is answered with the acknowledgements that came, and its bytes
  stop counting. A record without its acknowledgement then has an unknown outcome (it may have
  reached the brokers), whatever librdkafka reports later; its request says so for that record.
  Deadlines are checked by one sweep every ``SWEEP_S`` while requests wait, not by a timer per
  request (arming and cancelling one cost about ten futures: 3.5 against 0.3 us on uvloop).
- A record librdkafka refuses for good when it is queued (too large for ``message.max.bytes``) is
  not queued and gets that error as its acknowledgement; the request's other records are queued.

States: ``up`` (sending) ⇄ ``down`` (librdkafka reported all brokers down; until a record is
acknowledged again, or 5 s pass, sends are refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException

from ferry import kafka, log
from ferry.deadlines import Deadlines
from ferry.errors import FerryError
from ferry.gateway import acks
from ferry.gateway.records import Outgoing

_log = log.get_logger(__name__)
DOWN_RECHECK_S = 5.0
SWEEP_S = 0.1
"""How often the deadlines of waiting requests are checked: a request is answered at most this late."""


class Busy(FerryError):
    """Kafka cannot take records now; ``retry_after_s`` says when to try again. ``at``: the index of
    the first record not queued (it and every record after it were not)."""

    def __init__(self, message: str, retry_after_s: int = 1, at: int = 0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.at = at


REFUSED_FOR_GOOD = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_MSG,
    }
)
"""Errors for which the same record is refused again on any retry: the record's own error."""

PRODUCER_LOST = frozenset(
    {
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.UNKNOWN_PRODUCER_ID,
        KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    }
)
"""Errors after which an idempotent producer's later records keep failing (the brokers fenced it or
lost its state, as after an outage): a new producer (new producer id) recovers. librdkafka reports
some of them per record only, not as a fatal error."""


Ack = tuple[KafkaError | None, int, int]
"""One record's acknowledgement: (error or None, partition, offset)."""


def groups(items: Sequence[tuple[Outgoing, str, int]], run_max: int) -> Iterator[tuple[int, int]]:
    """A request's records — (record, topic, size) each — in order, as ``items[start:stop]`` ranges
    sent in one call each: a run of consecutive records for one topic with neither headers nor a
    chosen partition (``produce_batch`` costs librdkafka about half the CPU per record of one
    ``produce()`` each), or one record alone. A record over ``run_max`` bytes, which librdkafka may
    refuse for its size (``message.max.bytes``), is alone, so that its refusal stops the request
    there; so is the record of a one-record request (cheaper that way)."""
    start = 0  # of the run being gathered; empty when start == i
    run_topic = ""
    for i, (rec, topic, size) in enumerate(items):
        plain = not rec.headers and rec.partition is None and size <= run_max
        if start < i and (not plain or topic != run_topic):
            yield start, i
            start = i
        if not plain:
            yield i, i + 1
            start = i + 1
        elif start == i:
            run_topic = topic
    if start < len(items):
        yield start, len(items)


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
        self.produce_timeout_s = produce_timeout_ms / 1000
        self.in_flight_bytes = 0
        self._down_since: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: list[acks.Acks] = []  # requests settled, not yet handed to the loop
        self._deadlines: Deadlines[acks.Acks] | None = None  # requests waiting; loop thread
        self._pending, self._take = acks.implementation()
        self.native_acks = self._pending is not acks.Pending  # for the start log line
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
        # A record this large may be refused by librdkafka (message.max.bytes): it is sent alone,
        # so that a refusal stops the request there and no record after it is queued.
        self._run_max = self.max_record_bytes = int(self._config.get("message.max.bytes", 1_000_000))

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

    def send_many(self, items: Sequence[tuple[Outgoing, str, int]]) -> tuple[acks.Acks, Busy | None]:
        """Queue a request's records — (record, topic, size) each, in order — and return their
        :class:`~ferry.gateway.acks.Acks`, whose future resolves to a list with one :data:`Ack` per
        record, in order, once the brokers acknowledged (or failed) every queued record, or to None
        if :meth:`expire` came first (then ``acks`` holds those that came). When Kafka
        cannot take a record now, it and the records after it are not queued (their entries stay
        None) and the :class:`Busy` saying why is returned beside them. A record refused for good
        (:data:`REFUSED_FOR_GOOD`) is not queued either: its entry is ``(error, None, None)``."""
        assert self._loop is not None, "Producer.start() was not called"
        # Until sealed, the records not yet queued count too: no early finish.
        pending = self._pending(self._loop.create_future(), len(items), self._done)
        offered = len(items)
        busy: Busy | None = None
        if self.down:
            busy = Busy("Kafka brokers are unreachable from the gateway; retry shortly", retry_after_s=2)
            items = ()
        queued = queued_bytes = 0
        with self._swap:
            producer = self._p
            fit, over = self._within_bound(items)
            for start, stop in groups(items[:fit], self._run_max):
                n, n_bytes, refused = self._send_group(producer, pending, items, start, stop)
                queued, queued_bytes = queued + n, queued_bytes + n_bytes
                if refused is not None:
                    busy = refused
                    break
            else:
                busy = busy or over
        self.in_flight_bytes += queued_bytes
        pending.size = queued_bytes
        if pending.seal(offered - queued):  # nothing queued, or every acknowledgement came already
            self._settle([pending])
        return pending, busy

    def watch(self, pending: acks.Acks, deadline: float) -> None:
        """(Loop thread.) Expire ``pending`` at ``deadline`` (``time.monotonic()``) unless it is
        settled by then; costs a list append (the sweep drops it once settled)."""
        assert self._loop is not None, "Producer.start() was not called"
        if self._deadlines is None:
            self._deadlines = Deadlines(self._loop, _settled, self.expire, SWEEP_S)
        self._deadlines.watch(pending, deadline)

    def expire(self, pending: acks.Acks) -> None:
        """(Loop thread, at a request's deadline.) Resolve its future to None:
        the request is answered with the acknowledgements that came;
        its bytes stop counting (librdkafka still holds its records, bounded by
        ``queue.buffering.max.kbytes``, until they are acknowledged or time out)."""
        if pending.fut.done():
            return
        self.in_flight_bytes -= pending.size
        pending.size = 0
        pending.fut.set_result(None)

    def _within_bound(self, items: Sequence[tuple[Outgoing, str, int]]) -> tuple[int, Busy | None]:
        """How many of the first records fit in ``max_in_flight_bytes`` (one always does when
        nothing is in flight), and the :class:`Busy` for the rest if some do not."""
        held = self.in_flight_bytes
        for i, (_, _, size) in enumerate(items):
            if held + size > self.max_in_flight_bytes and held > 0:
                return i, Busy(
                    f"the gateway holds {held:,} bytes not yet acknowledged by Kafka "
                    f"(FERRY_GATEWAY_MAX_IN_FLIGHT_BYTES={self.max_in_flight_bytes:,}); retry shortly",
                    at=i,
                )
            held += size
        return len(items), None

    def _send_group(
        self, producer: Any, pending: acks.Acks, items: Sequence[tuple[Outgoing, str, int]], start: int, stop: int
    ) -> tuple[int, int, Busy | None]:
        """Queue ``items[start:stop]``, one range of :func:`groups`. Returns how many records were
        queued, their bytes, and the :class:`Busy` for the first one Kafka refused, if any (a
        refused record's callback is never called). The bytes bound refuses long before
        librdkafka's queue is full, so a refusal inside a run is a fatal producer error, which
        refuses the rest of it too. A record refused for good (only ever alone: :func:`groups`)
        gets its error as its acknowledgement and is not a refusal of the request."""
        if stop - start == 1:
            rec, topic, size = items[start]
            try:
                producer.produce(
                    topic,
                    rec.value,
                    rec.key,
                    partition=-1 if rec.partition is None else rec.partition,
                    headers=cast(Any, rec.headers or None),
                    on_delivery=pending.callback(start),
                )
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() in REFUSED_FOR_GOOD:
                    pending.acks[start] = (err, None, None)
                    return 0, 0, None
                return 0, 0, self._refused(exc, start)
            except BufferError as exc:
                return 0, 0, self._refused(exc, start)
            return 1, size, None
        group = items[start:stop]
        run = pending.batch(items, start, stop)
        producer.produce_batch(group[0][1], run)
        busy: Busy | None = None
        n = n_bytes = 0
        for msg, (_, _, size) in zip(run, group, strict=True):
            err = msg.get("_error")
            if err is None:
                n += 1
                n_bytes += size
            elif busy is None:
                busy = self._refused(KafkaException(err), start + n)
        return n, n_bytes, busy

    def _refused(self, exc: BufferError | KafkaException, at: int) -> Busy:
        """Why record ``at`` could not be queued now, as the request's answer says it (and a fatal
        error of the idempotent producer marks it for replacement)."""
        if isinstance(exc, BufferError):
            return Busy("the gateway's Kafka queue is full; retry shortly", at=at)
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError):
            if err.code() == KafkaError._QUEUE_FULL:
                return Busy("the gateway's Kafka queue is full; retry shortly", at=at)
            if err.fatal():
                self._rebuild = True
        why = err.str() if isinstance(err, KafkaError) else exc
        return Busy(f"Kafka refused the record now ({why}); retry", at=at)

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
            self._hand_over()

    def _hand_over(self) -> None:
        """Give the requests whose every record is settled to the event loop, in one call."""
        done = self._take(self._done)
        if done and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._settle, done)
            except RuntimeError:  # the loop is closed: nobody waits any more
                self._stop.set()

    def _settle(self, done: list[acks.Acks]) -> None:
        for pending in done:
            self.in_flight_bytes -= pending.size
            if pending.failed:
                self._note_failures(pending.acks)
            elif pending.size:  # every queued record was acknowledged
                self._down_since = None
            if not pending.fut.done():  # else answered at its deadline (expire)
                pending.fut.set_result(pending.acks)

    def _note_failures(self, entries: list[Ack | None]) -> None:
        for ack in entries:
            if ack is None:
                continue
            err = ack[0]
            if err is None:
                self._down_since = None
            elif (err.code() == KafkaError._MSG_TIMED_OUT or err.code() in PRODUCER_LOST) and not self._rebuild:
                # Not acknowledged in produce_timeout_ms (a cluster that restarted without our
                # producer's state never will), or fenced: a fresh producer (new producer id) recovers.
                self._rebuild = True

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


def _settled(pending: acks.Acks) -> bool:
    return bool(pending.fut.done())
