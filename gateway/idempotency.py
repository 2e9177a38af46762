"""Safe retries: a produce repeated with the same ``Idempotency-Key`` is answered, not written again.

Use case: a client's request timed out; it cannot know whether its records were written. It
retries with the same ``Idempotency-Key`` and gets the first answer — whichever gateway replica it
reaches, also after a restart (docs/contract.md §9). The memory of keys lives in Kafka: the topic
``FERRY_IDEMPOTENCY_TOPIC`` (log-compacted, kept 24 h), which every replica tails into memory.

One request with a key, in order:

1. If the key is known as ``done``: the same body answers the stored answer; another body is
   :class:`Conflicting` (422).
2. Otherwise the replica appends a ``claim`` for the key and reads the topic up to it (or, when
   its tail had already read every entry before the claim and no other request waits for the
   tail, decides at once). The first claim in the log wins: the winner runs the request; a loser
   waits for the winner's ``done`` (or, if it does not come in time, answers
   :class:`InProgress`, 409 with ``Retry-After``).
3. The winner appends ``done`` with the answer (acknowledged by the brokers) before answering.
   A request that could not write anything (503), or failed otherwise, appends ``released``
   instead: a retry runs again. So does one whose claim could not be written in time
   (:class:`KeyUnavailable`, 503).

Asking without the body: :meth:`Idempotency.recall` is what this replica has read of a key — an
answer, a request still running, or nothing a request sent now would meet
(``GET /api/v1/requests/{key}``).

Every step waits at most until the request's deadline (recording the answer: ``DONE_GRACE_S``
more), so a request with a key is answered as surely as one without. A claim that was neither
released nor done — its replica died, or Kafka was unreachable for the release too — holds the key
for ``claim_ttl_ms`` at most: a claim written that much later wins over it. The rule reads only the
times written in the entries, so every replica decides alike.

Cost per request with a key: two acknowledged writes to the topic (claim, done) and waiting for
the replica's own tail to pass its claim, measured in docs/gateway.md. Keys are per token: the
Kafka key is a hash of the token's name and the client's key; the topic holds no tokens.

Memory: every replica keeps the keys of the last 24 h, up to ``max_entries`` (oldest forgotten
first; each entry holds the stored answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from ferry import kafka, log
from ferry.clock import now_ms
from ferry.deadlines import time_out
from ferry.errors import FerryError
from ferry.gateway.producer import PRODUCER_LOST
from ferry.served_producer import ServedProducer

_log = log.get_logger(__name__)
KEEP_MS = 24 * 3600 * 1000
PARTITIONS = 9
Run = Callable[[], Awaitable[tuple[int, dict[str, Any]]]]


class Conflicting(FerryError):
    """The key was used before with another body (422)."""


class InProgress(FerryError):
    """A request with this key is still running elsewhere (409, retry)."""


class KeyUnavailable(FerryError):
    """The key's claim could not be written or read back in time; nothing was written (503, retry)."""


DONE_GRACE_S = 2.0
"""How long past the request's deadline the winner may wait for its answer's ``done`` entry."""


@dataclass
class Entry:
    state: str  # "claimed" | "done" | "released"
    fingerprint: str
    claim: str
    at_ms: int
    status: int = 0
    answer: dict[str, Any] | None = None


def _kafka_key(principal: str, key: str) -> bytes:
    """The topic's key for a token's ``Idempotency-Key``: keys are per token, and no token is stored."""
    return hashlib.sha256(f"{principal}\0{key}".encode()).hexdigest().encode()


def first_claim(old: Entry | None, claim: Entry, now: int, claim_ttl_ms: int) -> Entry:
    """The key's entry once ``claim`` is read after ``old`` (what every entry before it left): an
    earlier claim still live — done within 24 h, or claimed less than ``claim_ttl_ms`` before
    ``claim`` (a claim older than that was abandoned: no request runs that long) — stays; otherwise
    ``claim`` is the first."""
    if old is None or old.claim == claim.claim or old.state == "released" or now - old.at_ms >= KEEP_MS:
        return claim
    if old.state == "claimed" and claim.at_ms - old.at_ms >= claim_ttl_ms:
        return claim
    return old


class Idempotency:
    def __init__(
        self,
        client_config: Mapping[str, Any],
        topic: str,
        *,
        wait_s: float = 30.0,
        max_entries: int = 1_000_000,
        fetch_wait_ms: int = 10,
    ) -> None:
        self._config = dict(client_config)
        self._fetch_wait_ms = fetch_wait_ms  # how long the tail's fetches may wait for new entries
        self.topic = topic
        self.wait_s = wait_s
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()
        self._positions: dict[int, int] = {}  # partition → next offset the tail will read
        self._changed: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Requests waiting for the tail to pass an offset: (partition, offset, future); loop thread only.
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._partitions = PARTITIONS
        # No request runs longer than its deadline plus DONE_GRACE_S from its claim's time.
        self.claim_ttl_ms = int((2 * wait_s + DONE_GRACE_S + 5) * 1000)
        self._background: set[asyncio.Task[Any]] = set()  # releases written after the answer
        self._served_config = {
            **self._config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 1,
            "message.timeout.ms": max(1000, int(wait_s * 1000)),
            "error_cb": self._on_error,
        }
        self._fatal: str | None = None  # a fatal producer error (poll thread): replace before the next write
        self._served = ServedProducer(self._served_config, "gateway-idempotency")

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Blocking: create the topic unless it exists, read it to its end, then tail it."""
        config = {"cleanup.policy": "compact,delete", "retention.ms": str(KEEP_MS)}
        kafka.ensure_topic(self._config, self.topic, PARTITIONS, config)
        self._partitions = kafka.partition_counts(self._config, [self.topic]).get(self.topic, PARTITIONS)
        self._loop = loop
        self._changed = asyncio.Event()
        reader = kafka.reader(self._config, "gateway-idempotency-load")
        try:
            ends = kafka.read_partitions_to_end(
                reader, {(self.topic, p): 0 for p in range(self._partitions)}, self._take, timeout_s=60
            )
        finally:
            reader.close()
        self._positions = {p: end for (_, p), end in ends.items()}
        self._thread = threading.Thread(target=self._tail, name="ferry-gateway-idempotency", daemon=True)
        self._thread.start()
        _log.info("gateway.idempotency_loaded", keys=len(self._entries), topic=self.topic)

    def close(self) -> None:
        self._served.close(5)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    # --- one request --------------------------------------------------------------------------

    async def run(
        self, principal: str, key: str, fingerprint: str, run: Run, deadline: float | None = None
    ) -> tuple[int, dict[str, Any], bool]:
        """Answer (status, body, repeated) for the request: the first answer for this key, or run it.
        ``deadline`` (``time.monotonic()``; default ``wait_s`` from now): when the answer is due."""
        if deadline is None:
            deadline = time.monotonic() + self.wait_s
        kkey = _kafka_key(principal, key)
        known = self._known(kkey, fingerprint)
        if known is not None:
            return known[0], known[1], True
        claim = secrets.token_hex(8)
        ours = Entry("claimed", fingerprint, claim, now_ms())
        try:
            partition, offset = await self._append(kkey, ours, deadline)
            if offset is None:
                # Written, at an offset librdkafka could not learn (a retried produce the broker
                # had already written: DUPLICATE_SEQUENCE_NUMBER); where the tail must read to is
                # unknown, so this claim is given up.
                raise KeyUnavailable("the key's claim was written at an unknown offset; retry")
            if not self._waiters and self._positions.get(partition, 0) >= offset:
                # The tail has read every entry before our claim: whether one of them claimed the key
                # first is known without reading our own back. Only while no other request waits for
                # the tail: those are released together and share their next writes' batches.
                self._remember(kkey, first_claim(self._entries.get(kkey), ours, now_ms(), self.claim_ttl_ms))
            else:
                await self._until_read(partition, offset, deadline)
        except BaseException as exc:
            self._release(kkey, ours)  # the claim may have been written: it must not hold the key
            if isinstance(exc, FerryError) and not isinstance(exc, KeyUnavailable):
                raise KeyUnavailable(f"{exc}; nothing was written, retry") from None
            raise
        entry = self._entries.get(kkey)
        if entry is None or entry.claim != claim:
            return await self._wait_for_other(kkey, fingerprint, deadline)
        try:
            status, body = await run()
        except BaseException:
            self._release(kkey, ours)
            raise
        try:
            await self._append(kkey, Entry("done", fingerprint, claim, now_ms(), status, body), deadline + DONE_GRACE_S)
        except FerryError as exc:
            # The records' outcome is this answer; only the key's memory of it is missing. The key
            # frees after claim_ttl_ms, and a retry after that runs again.
            _log.warning("gateway.idempotency_answer_unrecorded", topic=self.topic, status=status, error=str(exc))
        return status, body, False

    def recall(self, principal: str, key: str) -> Entry | None:
        """What this replica has read of ``principal``'s request with ``key``: its entry while the
        request runs (``claimed``) or once answered (``done``); None when no such request ran in
        the last 24 h, it wrote nothing (``released``) or its claim was abandoned — a request sent
        with the key now would run."""
        entry = self._entries.get(_kafka_key(principal, key))
        if entry is None or entry.state == "released" or now_ms() - entry.at_ms > KEEP_MS:
            return None
        if entry.state == "claimed" and now_ms() - entry.at_ms >= self.claim_ttl_ms:
            return None
        return entry

    def _release(self, kkey: bytes, ours: Entry) -> None:
        """Append ``released`` for our claim without waiting for it (the answer goes out now)."""

        async def release() -> None:
            entry = Entry("released", ours.fingerprint, ours.claim, now_ms())
            failed = ""
            while now_ms() - ours.at_ms < self.claim_ttl_ms:  # after that the claim frees by itself
                try:
                    await self._append(kkey, entry, time.monotonic() + self.wait_s)
                    return
                except FerryError as exc:
                    if not failed:
                        _log.warning("gateway.idempotency_release_failed", topic=self.topic, error=str(exc))
                    failed = str(exc)
                await asyncio.sleep(1.0)

        task = asyncio.get_running_loop().create_task(release())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _known(self, kkey: bytes, fingerprint: str) -> tuple[int, dict[str, Any]] | None:
        entry = self._entries.get(kkey)
        if entry is None or entry.state == "released" or now_ms() - entry.at_ms > KEEP_MS:
            return None
        if entry.fingerprint != fingerprint:
            raise Conflicting("this Idempotency-Key was used with another request body in the last 24 h")
        if entry.state == "done":
            assert entry.answer is not None
            return entry.status, entry.answer
        return None

    async def _wait_for_other(self, kkey: bytes, fingerprint: str, deadline: float) -> tuple[int, dict[str, Any], bool]:
        assert self._changed is not None
        while time.monotonic() < deadline:
            self._changed.clear()  # before looking: a change from now on wakes the wait below
            known = self._known(kkey, fingerprint)
            if known is not None:
                return known[0], known[1], True
            entry = self._entries.get(kkey)
            if entry is None or entry.state == "released":
                raise InProgress("the earlier request with this Idempotency-Key wrote nothing; retry it")
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
        raise InProgress("a request with this Idempotency-Key is still running; retry it shortly")

    # --- the topic ------------------------------------------------------------------------------

    async def _append(self, kkey: bytes, entry: Entry, deadline: float) -> tuple[int, int | None]:
        """Write ``entry`` and wait for its acknowledgement until ``deadline``: (partition, offset),
        the offset None when the brokers wrote it at an offset librdkafka did not learn."""
        value = orjson.dumps(
            {
                "state": entry.state,
                "fingerprint": entry.fingerprint,
                "claim": entry.claim,
                "at": entry.at_ms,
                "status": entry.status,
                "answer": entry.answer,
            }
        )
        if self._fatal is not None:
            self._replace_producer()
        acked, on_delivery = self._served.acknowledgement(max(0.0, deadline - time.monotonic()))
        try:
            self._served.producer.produce(self.topic, key=kkey, value=value, on_delivery=on_delivery)
        except (BufferError, KafkaException) as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.fatal():
                self._fatal = err.str()
            raise FerryError(
                f"cannot write to {self.topic!r}: {err.str() if isinstance(err, KafkaError) else exc}"
            ) from None
        try:
            err, partition, offset = await acked
        except TimeoutError:
            raise FerryError(f"Kafka did not acknowledge a write to {self.topic!r} in time") from None
        if err is not None:
            if err.fatal() or err.code() in PRODUCER_LOST:
                self._fatal = err.str()
            raise FerryError(f"cannot write to {self.topic!r}: {err.str()}")
        return partition, offset

    def _on_error(self, err: KafkaError) -> None:
        """(Poll thread.) A fatal error — e.g. the brokers fenced the idempotent producer after an
        outage — ends that producer for good: the next write replaces it."""
        if err.fatal():
            self._fatal = err.str()

    def _replace_producer(self) -> None:
        """(Loop thread.) A new producer for the key's topic; the old one's writes fail (their
        requests were answered by their deadlines) and it is closed in a thread."""
        old, self._served = self._served, ServedProducer(self._served_config, "gateway-idempotency")
        _log.warning("gateway.idempotency_producer_replaced", topic=self.topic, reason=self._fatal)
        self._fatal = None
        asyncio.get_running_loop().run_in_executor(None, old.close, 0)

    async def _until_read(self, partition: int, offset: int, deadline: float) -> None:
        """Wait until the tail has read ``offset`` of ``partition`` (woken by the tail, no polling)."""
        if self._positions.get(partition, 0) > offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (partition, offset, waiter)
        self._waiters.append(entry)
        try:
            await time_out(waiter, max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise KeyUnavailable("the gateway could not read the key's claim back in time") from None
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    def _advanced(self) -> None:
        """(Loop thread, after the tail took entries.) Wake whoever waits for them."""
        assert self._changed is not None
        self._changed.set()
        for partition, offset, waiter in self._waiters:
            if self._positions.get(partition, 0) > offset and not waiter.done():
                waiter.set_result(None)

    def _take(self, msg: Message) -> None:
        """One record of the topic (tail thread, or the load at start): the latest entry per key,
        except that a later claim never replaces an earlier live one (the first claim wins)."""
        try:
            doc = orjson.loads(cast(bytes, msg.value()))
            new = Entry(doc["state"], doc["fingerprint"], doc["claim"], int(doc["at"]), doc["status"], doc["answer"])
        except (TypeError, ValueError, KeyError):
            return
        kkey = cast(bytes, msg.key())
        old = self._entries.get(kkey)
        if new.state == "claimed":
            if first_claim(old, new, now_ms(), self.claim_ttl_ms) is old:
                return  # a later claim never replaces an earlier live one
        elif old is not None and new.claim != old.claim and old.state != "released":
            return  # the outcome of a claim that lost
        self._remember(kkey, new)

    def _remember(self, kkey: bytes, entry: Entry) -> None:
        """(Tail or loop thread.) The key's entry now, most recent last, within ``max_entries``."""
        self._entries[kkey] = entry
        self._entries.move_to_end(kkey)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def _tail(self) -> None:
        consumer = kafka.reader(self._config, "gateway-idempotency", self._fetch_wait_ms)
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in self._positions.items()])
        try:
            while not self._stop.is_set():
                msgs = kafka.consume_ready(consumer, 1000, 0.05)
                touched = False
                for msg in msgs:
                    if msg.error() is not None:
                        continue
                    self._take(msg)
                    self._positions[cast(int, msg.partition())] = cast(int, msg.offset()) + 1
                    touched = True
                if touched and self._loop is not None:
                    try:
                        self._loop.call_soon_threadsafe(self._advanced)
                    except RuntimeError:
                        return
        finally:
            consumer.close()
