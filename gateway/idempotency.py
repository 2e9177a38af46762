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
   A request that could not write anything (503) appends ``released`` instead: a retry runs again.

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
from confluent_kafka import Message, TopicPartition

from ferry import kafka, log
from ferry.clock import now_ms
from ferry.errors import FerryError
from ferry.served_producer import ServedProducer

_log = log.get_logger(__name__)
KEEP_MS = 24 * 3600 * 1000
PARTITIONS = 9
Run = Callable[[], Awaitable[tuple[int, dict[str, Any]]]]


class Conflicting(FerryError):
    """The key was used before with another body (422)."""


class InProgress(FerryError):
    """A request with this key is still running elsewhere (409, retry)."""


@dataclass
class Entry:
    state: str  # "claimed" | "done" | "released"
    fingerprint: str
    claim: str
    at_ms: int
    status: int = 0
    answer: dict[str, Any] | None = None


def first_claim(old: Entry | None, claim: Entry, now: int) -> Entry:
    """The key's entry once ``claim`` is read after ``old`` (what every entry before it left): an
    earlier claim still live — not released, within 24 h, or done — stays; otherwise ``claim``
    is the first."""
    if old is not None and old.claim != claim.claim and old.state != "released" and now - old.at_ms < KEEP_MS:
        return old
    return claim


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
        self._served = ServedProducer(
            {**self._config, "enable.idempotence": True, "acks": "all", "linger.ms": 1}, "gateway-idempotency"
        )

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

    async def run(self, principal: str, key: str, fingerprint: str, run: Run) -> tuple[int, dict[str, Any], bool]:
        """Answer (status, body, repeated) for the request: the first answer for this key, or run it."""
        kkey = hashlib.sha256(f"{principal}\0{key}".encode()).hexdigest().encode()
        known = self._known(kkey, fingerprint)
        if known is not None:
            return known[0], known[1], True
        claim = secrets.token_hex(8)
        ours = Entry("claimed", fingerprint, claim, now_ms())
        partition, offset = await self._append(kkey, ours)
        if not self._waiters and self._positions.get(partition, 0) >= offset:
            # The tail has read every entry before our claim: whether one of them claimed the key
            # first is known without reading our own back. Only while no other request waits for
            # the tail: those are released together and share their next writes' batches.
            self._remember(kkey, first_claim(self._entries.get(kkey), ours, now_ms()))
        else:
            await self._until_read(partition, offset)
        entry = self._entries.get(kkey)
        if entry is None or entry.claim != claim:
            return await self._wait_for_other(kkey, fingerprint)
        try:
            status, body = await run()
        except BaseException:
            await self._append(kkey, Entry("released", fingerprint, claim, now_ms()))
            raise
        await self._append(kkey, Entry("done", fingerprint, claim, now_ms(), status, body))
        return status, body, False

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

    async def _wait_for_other(self, kkey: bytes, fingerprint: str) -> tuple[int, dict[str, Any], bool]:
        assert self._changed is not None
        deadline = time.monotonic() + self.wait_s
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

    async def _append(self, kkey: bytes, entry: Entry) -> tuple[int, int]:
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
        acked, on_delivery = self._served.acknowledgement()
        self._served.producer.produce(self.topic, key=kkey, value=value, on_delivery=on_delivery)
        err, partition, offset = await acked
        if err is not None:
            raise FerryError(f"cannot write to {self.topic!r}: {err.str()}")
        return partition, offset

    async def _until_read(self, partition: int, offset: int) -> None:
        """Wait until the tail has read ``offset`` of ``partition`` (woken by the tail, no polling)."""
        if self._positions.get(partition, 0) > offset:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (partition, offset, waiter)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(waiter, self.wait_s)
        except TimeoutError:
            raise InProgress("the gateway could not read its own claim back in time; retry") from None
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
            if first_claim(old, new, now_ms()) is old:
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
