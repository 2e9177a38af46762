"""The transaction log in Kafka: where half messages and their outcomes are stored.

Use case: the gateway's transaction routes append a transaction's entries and read its state back;
the back-check runner on the worker that owns a log partition reads the same entries. Nothing about
a transaction is in the metadata database (docs/design/transactions.md).

The log is one internal topic (``FERRY_TXN_TOPIC``, default ``__ferry_txn``). A transaction's id
names where its entries start: ``<partition>.<offset>.<nonce>``, the partition and offset of its
``prepare`` entry, and every later entry of it is written to that partition. So the state of one
transaction is the fold (:func:`ferry.txn.fold`) of its partition read from the prepare's offset to
the partition's end — never a scan from the topic's start.

Blocking calls (Kafka I/O) run in a thread from async code; the gateway's hot path uses the
``*_async`` twins instead, which wait on futures the producer's poll thread (and the live view's
thread) resolve, so a transaction in flight holds no thread. One :class:`TxnLog` keeps one
producer (idempotent, ``acks=all``) and its readers, so repeated calls do not reconnect.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import queue
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer

from ferry import kafka, log, txn
from ferry.clock import now_ms
from ferry.errors import FerryError
from ferry.served_producer import Acked, OnDelivery, ServedProducer
from ferry.switched_producer import DWELL_S, SwitchedProducer
from ferry.txn_committed import CommittedWriter
from ferry.txn_tail import TxnTail

_log = log.get_logger(__name__)
DEFAULT_TOPIC = "__ferry_txn"
PARTITIONS = 9
READERS = 8
"""Readers of one :class:`TxnLog` (each a consumer): reads of different transactions run in parallel."""
OWN_PREPARES = 10_000
"""Prepares this process wrote, kept until its live view has read them or they are decided here (a
commit that follows at once need not wait for the view to fetch its prepare, nor — when its decision
lands right after the prepare — to fetch anything)."""
OWN_BYTES = 16 * 1024 * 1024
"""And at most this many bytes of them (as stored in the log): a gateway whose commits go to other
replicas keeps its prepares until they are evicted. An evicted one costs its commit a wait for the
view, nothing else."""
RETENTION_MS = 7 * 24 * 3600 * 1000  # far beyond the longest life of a transaction (timeout + checks)
BUSY_AT = 16
"""Entries waiting for their acknowledgements from which a log with a lingering second producer
(``busy_linger_ms``) sends new ones through it; it switches back at a quarter of that."""
RECOUNT_S = 5.0
"""How often at most an id naming a partition this process has not seen makes it count the log's
partitions again (an operator added some, and a replica started since prepares there)."""
_ID = re.compile(r"(\d{1,6})\.(\d{1,19})\.([0-9a-f]{16})")


class TxnLogError(FerryError):
    """The transaction log could not be written or read (Kafka unavailable, deadline passed)."""


class TxnTooLarge(TxnLogError):
    """The brokers refused an entry as larger than they take (``message.max.bytes``): not a
    passing failure, so retrying the same request cannot succeed."""

    def __init__(self, topic: str, size: int) -> None:
        super().__init__(
            f"the transaction takes {size:,} bytes in the transaction log {topic!r}, more than the brokers"
            " take in one record (message.max.bytes, 1 MB by default): prepare fewer or smaller records"
        )
        self.size = size


@dataclass(frozen=True, slots=True)
class TxnId:
    partition: int
    offset: int
    nonce: str

    def __str__(self) -> str:
        return f"{self.partition}.{self.offset}.{self.nonce}"


def parse_id(raw: str) -> TxnId | None:
    """The id's parts, or None when ``raw`` is not an id this log could have made: only the
    canonical spelling it hands out (``00.0.<nonce>`` names no transaction, even though
    ``0.0.<nonce>`` may)."""
    m = _ID.fullmatch(raw)
    if m is None:
        return None
    tid = TxnId(int(m.group(1)), int(m.group(2)), m.group(3))
    return tid if str(tid) == raw else None


def new_nonce() -> str:
    return secrets.token_hex(8)


def encode(entry: Mapping[str, Any]) -> bytes:
    return orjson.dumps(entry)


def entry_of(msg: Message) -> dict[str, Any] | None:
    """A log record as an entry with its ``id`` (a prepare's id is made from where it is stored);
    None for a record that is not a valid entry (skipped, never fatal)."""
    try:
        entry = orjson.loads(cast(bytes, msg.value()))
    except (TypeError, ValueError):
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str):
        return None
    if entry["kind"] == "prepare":
        key = msg.key()
        nonce = key.decode("ascii", "replace") if isinstance(key, bytes) else ""
        entry["id"] = str(TxnId(cast(int, msg.partition()), cast(int, msg.offset()), nonce))
    elif not isinstance(entry.get("id"), str):
        return None
    return entry


class TxnLog:
    """Append entries to the transaction log and fold one transaction from it."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        topic: str = DEFAULT_TOPIC,
        timeout_s: float = 10.0,
        follow: bool = False,
        follow_wait_ms: int = 10,
        linger_ms: int = 1,
        sticky_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        busy_linger_ms: int | None = None,
        busy_at: int = BUSY_AT,
        busy_dwell_s: float = DWELL_S,
    ) -> None:
        """``follow``: keep a live view of the log (:mod:`ferry.txn_tail`) so that reads of
        transactions prepared since need no read of the log (the gateway's setting); its fetches
        may wait ``follow_wait_ms`` for new entries. ``linger_ms``: how long the producer waits to
        fill a batch (every step of a transaction waits for one write). ``sticky_ms``: how long
        prepares go to one partition before another is picked at random (0: each its own pick);
        the entries of concurrent transactions then share their partition's batch in a produce
        request, and over time every partition gets its share (sticky partitioning, as Kafka's
        producer does for records without a key, KIP-480). ``busy_linger_ms``: a second producer
        with this linger takes the entries while at least ``busy_at`` wait for their
        acknowledgements (:mod:`ferry.switched_producer`, switching at most every
        ``busy_dwell_s``; None: one producer). A commit's records go as the entries do."""
        self._config = dict(client_config)
        self._sticky_s = sticky_ms / 1000
        self._clock = clock
        self._follow = follow
        self._follow_wait_ms = follow_wait_ms
        self._tail: TxnTail | None = None
        self.topic = topic
        self.timeout_s = timeout_s
        # A poll thread serves the acknowledgements; concurrent writers share the producer's batches.
        self._served = ServedProducer(
            {**self._config, "enable.idempotence": True, "acks": "all", "linger.ms": linger_ms}, "txn-log"
        )
        self.producer = self._served.producer
        busy = None
        if busy_linger_ms is not None:
            busy = ServedProducer(
                {**self._config, "enable.idempotence": True, "acks": "all", "linger.ms": busy_linger_ms}, "txn-log-busy"
            )
        self._entries = SwitchedProducer(self._served, busy, busy_at, busy_at // 4, busy_dwell_s)
        self._committed = CommittedWriter(self._soon)
        self._own: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()  # id -> (prepare, size)
        self._own_bytes = 0
        # Reads run in parallel, each on a reader of its own (at most READERS, made when needed).
        self._readers: queue.SimpleQueue[Consumer] = queue.SimpleQueue()
        self._made = threading.Semaphore(READERS)
        self._all_readers: list[Consumer] = []
        self._partitions: int | None = None  # where this process prepares, and its live view follows
        self._readable = 0  # partitions the log was last seen to have (it may have grown since start)
        self._sticky, self._sticky_until = 0, 0.0  # where prepares go now, and until when (monotonic)
        self.log_reads = 0
        """Reads of a commit or rollback that the live view could not answer, so the log was read
        (a prepare from before the view started, one evicted from it, or the view behind). A
        ``GET`` of a transaction always reads the log."""
        self._counted_at = 0.0  # time.monotonic() of the last count
        self._ensured = threading.Lock()

    def view_started(self, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the live view knows where it starts in every
        partition: from then on it answers for every transaction prepared. True at once without a
        view; call :meth:`ensure` first."""
        return self._tail is None or self._tail.started(timeout_s)

    def ensure(self) -> int:
        """Create the log topic unless it exists; returns its partition count."""
        kafka.ensure_topic(self._config, self.topic, PARTITIONS, {"retention.ms": str(RETENTION_MS)})
        counts = kafka.partition_counts(self._config, [self.topic])
        if self.topic not in counts:
            raise TxnLogError(f"transaction log topic {self.topic!r} has no partitions after creating it")
        with self._ensured:
            self._partitions = counts[self.topic]
            self._readable = max(self._readable, self._partitions)
            self._counted_at = time.monotonic()
            if self._follow and self._tail is None:
                self._tail = TxnTail(self._config, self.topic, self._partitions, self._follow_wait_ms)
        return self._partitions

    def in_log(self, txn_id: TxnId) -> bool:
        """Blocking: whether the log has the id's partition. An id naming a partition beyond the
        count this process learnt makes it count again (at most every :data:`RECOUNT_S`): the
        log may have grown since, and another replica prepared there. An id naming one the log
        does not have (made up, or from a log with more partitions) names no transaction: reading
        a partition that does not exist would only wait for its end until the deadline."""
        if self._partitions is None:
            self.ensure()
        if txn_id.partition < self._readable:
            return True
        if time.monotonic() - self._counted_at < RECOUNT_S:
            return False
        self._counted_at = time.monotonic()
        try:
            counts = kafka.partition_counts(self._config, [self.topic])
        except kafka.KafkaUnavailable as exc:
            raise TxnLogError(f"cannot count the partitions of the transaction log {self.topic!r}: {exc}") from None
        if counts.get(self.topic, 0) > self._readable:
            _log.info("txn_log.partitions_grew", topic=self.topic, was=self._readable, now=counts[self.topic])
            # Read there from now on; prepares stay where the live view follows (until a restart).
            self._readable = counts[self.topic]
        return txn_id.partition < self._readable

    @property
    def producer_switches(self) -> int:
        """Switches between the two producers so far (0 with one)."""
        return self._entries.switches

    @property
    def writes_outstanding(self) -> int:
        """Entries and records written and not yet reported by librdkafka, or held for a switch."""
        return self._entries.outstanding

    @property
    def committed_entries(self) -> int:
        """``committed`` entries this process queued through :meth:`committed_soon`."""
        return self._committed.entries

    @property
    def committed_transactions(self) -> int:
        """Transactions those entries hold (more than the entries under load)."""
        return self._committed.transactions

    @property
    def lingering(self) -> bool:
        """Whether writes go through the lingering producer now (or are held for it)."""
        return self._entries.lingering_now

    def close(self) -> None:
        """Flush what the producers hold and close (blocking; :meth:`flush_committed` first, on the
        loop, or ``committed`` entries still waiting for the one in flight are not written)."""
        if self._tail is not None:
            self._tail.close()
        self._served.close(self.timeout_s)
        if self._entries.lingering is not None:
            self._entries.lingering.close(self.timeout_s)
        for reader in self._all_readers:
            reader.close()

    # --- writing ----------------------------------------------------------------------------

    def prepare(self, entry: Mapping[str, Any]) -> TxnId:
        """Store a ``prepare`` entry (durable when this returns); the new transaction's id."""
        partitions = self._partitions or self.ensure()
        nonce = new_nonce()
        partition = self._prepare_partition(partitions)
        offset = self._produce(partition, nonce.encode(), {**entry, "kind": "prepare"})
        return TxnId(partition, offset, nonce)

    def append(self, txn_id: TxnId, entry: Mapping[str, Any]) -> int:
        """Store a later entry of ``txn_id`` in its partition; its offset."""
        return self._produce(txn_id.partition, str(txn_id).encode(), {**entry, "id": str(txn_id)})

    async def prepare_async(self, entry: Mapping[str, Any]) -> TxnId:
        """:meth:`prepare` without a thread: awaits the acknowledgement."""
        partitions = self._partitions
        if partitions is None:
            partitions = await asyncio.to_thread(self.ensure)
        nonce = new_nonce()
        partition = self._prepare_partition(partitions)
        stored = {**entry, "kind": "prepare", "ts": entry.get("ts", now_ms())}  # as written
        acked, size = self._queue(partition, nonce.encode(), stored)
        txn_id = TxnId(partition, await self._acknowledgement(acked, size), nonce)
        if self._follow:
            self._own[str(txn_id)] = (stored, size)
            self._own_bytes += size
            while self._own and (len(self._own) > OWN_PREPARES or self._own_bytes > OWN_BYTES):
                self._own_bytes -= self._own.popitem(last=False)[1][1]
        return txn_id

    def _prepare_partition(self, partitions: int) -> int:
        """Where the next prepare goes: the partition picked less than ``sticky_ms`` ago, or a new
        one, at random."""
        now = self._clock()
        if now >= self._sticky_until or self._sticky >= partitions:
            self._sticky, self._sticky_until = secrets.randbelow(partitions), now + self._sticky_s
        return self._sticky

    def _own_prepare(self, txn_id: str) -> dict[str, Any] | None:
        """Forget the prepare this process wrote as ``txn_id``; the entry, or None if not kept."""
        kept = self._own.pop(txn_id, None)
        if kept is None:
            return None
        self._own_bytes -= kept[1]
        return kept[0]

    async def append_async(self, txn_id: TxnId, entry: Mapping[str, Any]) -> int:
        """:meth:`append` without a thread: awaits the acknowledgement."""
        return await self._produce_async(txn_id.partition, str(txn_id).encode(), {**entry, "id": str(txn_id)})

    async def decide_async(
        self, txn_id: TxnId, entry: Mapping[str, Any]
    ) -> tuple[txn.Txn | None, dict[str, Any] | None]:
        """Append a decision of ``txn_id`` and fold the transaction as the log holds it up to and
        including that decision, so that the first decision there stands. The entries before it
        are read (from the live view, once it has read up to the decision); the decision itself
        is folded as written, without waiting to read it back."""
        me = str(txn_id)
        stored = {**entry, "id": me, "ts": entry.get("ts", now_ms())}
        at = await self._produce_async(txn_id.partition, me.encode(), stored)
        own = self._own_prepare(me)
        if own is not None and at == txn_id.offset + 1:
            # The decision lies right after this process's own prepare: nothing can come before
            # it but the prepare, which is known, so there is nothing for the view to read.
            return _fold(me, [dict(own), stored])
        before = await self._entries_async(txn_id, at - 1)
        return _fold(me, [*before, stored])

    def committed_soon(self, txn_id: TxnId, results: list[dict[str, Any]]) -> asyncio.Future[int]:
        """(On the loop.) Log that ``txn_id`` is committed with ``results``, in one entry with the
        other transactions of its partition committed while the previous such entry was in flight
        (:mod:`ferry.txn_committed`); the future of that entry's offset (or :class:`TxnLogError`).
        Call :meth:`flush_committed` before :meth:`close`."""
        return self._committed.add(txn_id.partition, str(txn_id), results)

    def flush_committed(self) -> None:
        """(On the loop.) Queue every ``committed`` entry still waiting for the one before it, so
        that closing the producers writes them."""
        self._committed.flush()

    def _soon(self, partition: int, key: bytes, entry: Mapping[str, Any]) -> asyncio.Future[int]:
        """Queue an entry for a caller that need not wait (the ``committed`` writer's port): it is
        in the producer when this returns (a graceful close flushes it), and the future gives its
        offset (or :class:`TxnLogError`)."""
        acked, size = self._queue(partition, key, entry)
        logged: asyncio.Future[int] = acked.get_loop().create_future()

        def settle(_: asyncio.Future[Acked]) -> None:
            if acked.cancelled():
                logged.cancel()
                return
            try:
                logged.set_result(self._offset(acked, size))
            except TxnLogError as exc:
                logged.set_exception(exc)

        acked.add_done_callback(settle)
        return logged

    async def _produce_async(self, partition: int, key: bytes, entry: Mapping[str, Any]) -> int:
        acked, size = self._queue(partition, key, entry)
        return await self._acknowledgement(acked, size)

    def _queue(self, partition: int, key: bytes, entry: Mapping[str, Any]) -> tuple[asyncio.Future[Acked], int]:
        """Queue an entry in a producer; the future of its acknowledgement (which times out after
        ``timeout_s``), and its size."""
        value = encode({**entry, "ts": entry.get("ts", now_ms())})

        def produce(producer: Producer, on_delivery: OnDelivery) -> None:
            self._produce_value(producer, partition, key, value, on_delivery)

        return self._entries.send(produce, self.timeout_s), len(value)

    async def _acknowledgement(self, acked: asyncio.Future[Acked], size: int) -> int:
        with contextlib.suppress(TimeoutError):  # _offset says so
            await acked
        return self._offset(acked, size)

    def _offset(self, acked: asyncio.Future[Acked], size: int) -> int:
        """The offset an acknowledged entry got; raises :class:`TxnLogError` for a failure or
        when ``acked`` timed out."""
        try:
            err, _, offset = acked.result()
        except TimeoutError:
            raise TxnLogError(
                f"the transaction log {self.topic!r} did not acknowledge within {self.timeout_s:g} s"
            ) from None
        return self._acknowledged(err, offset, size)

    def _send(
        self,
        partition: int,
        key: bytes,
        entry: Mapping[str, Any],
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> bytes:
        value = encode({**entry, "ts": entry.get("ts", now_ms())})
        self._produce_value(self.producer, partition, key, value, on_delivery)
        return value

    def _produce_value(
        self, producer: Producer, partition: int, key: bytes, value: bytes, on_delivery: OnDelivery
    ) -> None:
        try:
            producer.produce(self.topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise TxnTooLarge(self.topic, len(value)) from None
            raise TxnLogError(f"cannot write to the transaction log {self.topic!r}: {exc}") from None
        except BufferError as exc:
            raise TxnLogError(f"cannot write to the transaction log {self.topic!r}: {exc}") from None

    def _acknowledged(self, err: KafkaError | None, offset: int, size: int) -> int:
        if err is not None:
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise TxnTooLarge(self.topic, size)
            raise TxnLogError(f"cannot write to the transaction log {self.topic!r}: {err.str()}")
        return int(offset)

    def _produce(self, partition: int, key: bytes, entry: Mapping[str, Any]) -> int:
        done = threading.Event()
        result: dict[str, Any] = {}

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            result["err"], result["offset"] = err, msg.offset()
            done.set()

        value = self._send(partition, key, entry, on_delivery)
        if not done.wait(self.timeout_s):
            raise TxnLogError(f"the transaction log {self.topic!r} did not acknowledge within {self.timeout_s:g} s")
        return self._acknowledged(result["err"], result["offset"], len(value))

    async def write_records_async(
        self, txn_id: str, records: list[dict[str, Any]], timeout_s: float = 30.0
    ) -> list[dict[str, Any]]:
        """:func:`write_records` through this log's producers (as its entries go, so only one of
        them has writes in flight), without a thread: the poll threads settle each record's future."""
        acks: list[asyncio.Future[Acked]] = []
        for seq, rec in enumerate(records):
            args, kwargs = _record_args(txn_id, seq, rec)

            def produce(
                producer: Producer, on_delivery: OnDelivery, args: Any = args, kwargs: dict[str, Any] = kwargs
            ) -> None:
                producer.produce(*args, **{**kwargs, "on_delivery": on_delivery})

            while True:
                try:
                    acks.append(self._entries.send(produce, timeout_s))
                    break
                except BufferError:
                    await asyncio.sleep(0.01)  # the poll thread drains the queue
        results: list[dict[str, Any] | None] = []
        for acked in acks:
            with contextlib.suppress(Exception):  # then this result is missing: raised below
                await acked
            if acked.exception() is None:  # done: awaited above (a cancelled wait raised)
                err, partition, offset = acked.result()
                results.append({"partition": partition, "offset": offset} if err is None else {"error": err.str()})
            else:
                results.append(None)
        return _all_acknowledged(txn_id, results)

    # --- reading ----------------------------------------------------------------------------

    def _reader(self) -> Consumer:
        """A free reader: an idle one, else a new one while fewer than READERS exist, else the
        next one given back."""
        try:
            return self._readers.get_nowait()
        except queue.Empty:
            pass
        if self._made.acquire(blocking=False):
            reader = kafka.reader(self._config, "txn-reader")
            self._all_readers.append(reader)
            return reader
        return self._readers.get(timeout=self.timeout_s)

    def read(
        self, txn_id: TxnId, up_to: int | None = None, *, recent: bool = False
    ) -> tuple[txn.Txn | None, dict[str, Any] | None]:
        """The transaction's state from its entries (up to and including offset ``up_to``), and its
        prepare entry; ``(None, None)`` when no such transaction was prepared.

        Without ``up_to`` the log is read to its end, so the answer includes every entry written
        before the call (by any gateway), unless ``recent``: then the live view may answer with
        what it has seen, a few milliseconds behind the log (a commit's first look, which appends
        its decision and reads again up to it)."""
        me = str(txn_id)
        if self._follow and self._tail is None:
            self.ensure()  # a replica that only commits starts its view on its first read
        if not self.in_log(txn_id):
            return None, None
        if self._tail is not None and (up_to is not None or recent):
            raw = self._tail.entries(txn_id.partition, txn_id.offset, me, up_to, wait_s=self.timeout_s / 2)
            if raw is not None:
                return _fold(me, [e for e in map(_decode, raw) if e is not None])
        return self._read_log(txn_id, up_to)

    def _read_log(self, txn_id: TxnId, up_to: int | None) -> tuple[txn.Txn | None, dict[str, Any] | None]:
        """Blocking: the transaction folded from its partition of the log itself, read from its
        prepare to ``up_to`` (or the end)."""
        return _fold(str(txn_id), self._read_entries(txn_id, up_to))

    def _read_entries(self, txn_id: TxnId, up_to: int | None) -> list[dict[str, Any]]:
        """Blocking: the transaction's entries in its partition of the log itself, from its
        prepare to ``up_to`` (or the end)."""
        me = str(txn_id)
        entries: list[dict[str, Any]] = []
        later_key = me.encode()
        prepare_key = txn_id.nonce.encode()

        def take(msg: Message) -> None:
            # Only this transaction's entries are decoded: its prepare (keyed by its nonce, at its
            # offset) and its later entries (keyed by its id). The rest of the partition is other
            # transactions' entries, prepares with all their records among them.
            key = msg.key()
            ours = key == later_key or (key == prepare_key and msg.offset() == txn_id.offset)
            if not ours and not _shared_by(key, later_key):
                return
            entry = entry_of(msg)
            mine = txn.concerning(entry, me) if entry is not None else None
            if mine is not None:
                entries.append(mine)

        tp = (self.topic, txn_id.partition)
        stop = {tp: up_to + 1} if up_to is not None else None
        # Every entry of the transaction lies at or after its prepare's offset. An id naming an
        # offset past the end (made up, or from a lost log) is read from the end the live view
        # last saw instead, which is never past the end: the read ends at once, with nothing.
        end = self._tail.end_of(txn_id.partition) if self._tail is not None else None
        start = txn_id.offset if end is None else min(txn_id.offset, end)
        reader = self._reader()
        try:
            # Without an end known, such an offset gets no end from some brokers: after a second
            # the partition is read from its start instead.
            kafka.read_partitions_to_end(
                reader, {tp: start}, take, stop_at=stop, timeout_s=self.timeout_s, rewind_after_s=1.0
            )
        except kafka.KafkaUnavailable as exc:
            raise TxnLogError(f"cannot read the transaction log {self.topic!r}: {exc}") from None
        finally:
            self._readers.put(reader)
        return entries

    async def read_async(
        self, txn_id: TxnId, up_to: int | None = None, *, recent: bool = False
    ) -> tuple[txn.Txn | None, dict[str, Any] | None]:
        """:meth:`read`, answered by the live view without a thread when it can vouch for the
        transaction; else the log is read in a thread."""
        return _fold(str(txn_id), await self._entries_async(txn_id, up_to, recent=recent))

    async def _entries_async(self, txn_id: TxnId, up_to: int | None, *, recent: bool = False) -> list[dict[str, Any]]:
        """The transaction's entries, as :meth:`read_async` folds them."""
        me = str(txn_id)
        if self._follow and self._tail is None:
            await asyncio.to_thread(self.ensure)  # a replica that only commits starts its view on its first read
        if self._partitions is None:
            await asyncio.to_thread(self.ensure)
        if txn_id.partition >= self._readable and not await asyncio.to_thread(self.in_log, txn_id):
            return []
        kept = self._own.get(me) if recent else None
        if kept is not None and self._tail is not None and not self._tail.has_read(txn_id.partition, txn_id.offset):
            # Prepared here a moment ago and not yet seen by the view: nothing else can be known of
            # it yet, and a recent read may be that far behind (a decision reads what came before
            # it). Kept for the decision that usually follows (:meth:`decide_async`).
            return [dict(kept[0])]
        if self._tail is not None and (up_to is not None or recent):
            raw = await self._tail.entries_async(txn_id.partition, txn_id.offset, me, up_to, self.timeout_s / 2)
            if raw is not None:
                if kept is not None and len(raw) == 1:
                    # The view holds only the prepare, which this process wrote: the entry as
                    # written, without decoding it (still kept for the decision that follows).
                    return [dict(kept[0])]
                return [e for e in map(_decode, raw) if e is not None]
            self.log_reads += 1
        return await asyncio.to_thread(self._read_entries, txn_id, up_to)  # the view already had its wait


def _shared_by(key: bytes | None, txn_key: bytes) -> bool:
    """Whether an entry's key names the transaction, alone or among others (a shared ``committed``
    entry): as one of its space-separated ids, not as a part of one."""
    if not key or txn_key not in key:
        return False
    return txn_key in key.split(b" ")


def _decode(value: bytes) -> dict[str, Any] | None:
    """One of a known transaction's raw entries (the view kept it by its key)."""
    try:
        entry = orjson.loads(value)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("kind"), str) else None


def _fold(me: str, entries: list[dict[str, Any]]) -> tuple[txn.Txn | None, dict[str, Any] | None]:
    """The transaction ``me`` from its entries (its prepare first), and its prepare."""
    if not entries or entries[0]["kind"] != "prepare":
        return None, None
    entries[0]["id"] = me
    mine = [entries[0]]
    mine.extend(e for e in (txn.concerning(entry, me) for entry in entries[1:]) if e is not None)
    return txn.fold(mine).get(me), entries[0]


# --- the records of a transaction ---------------------------------------------------------------


def stored_record(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
) -> dict[str, Any]:
    """A record as a prepare entry keeps it (JSON: bytes as base64)."""

    def b64(raw: bytes | None) -> str | None:
        return None if raw is None else base64.b64encode(raw).decode("ascii")

    return {
        "topic": topic,
        "key_b64": b64(key),
        "value_b64": b64(value),
        "headers": [[name, b64(v)] for name, v in headers or ()],
        "partition": partition,
    }


def write_records(
    producer: Producer, txn_id: str, records: list[dict[str, Any]], timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """Blocking: write a committed transaction's stored records to their topics, each with
    ``ferry-transaction-id`` and ``ferry-transaction-seq``, and wait for every acknowledgement
    (``producer``: idempotent, ``acks=all``). One result per record as the gateway's §9 answer:
    ``{"partition", "offset"}`` or ``{"error"}``. Raises :class:`TxnLogError` when not every record
    was acknowledged in time (then nothing may be logged as committed)."""
    results: list[dict[str, Any] | None] = [None] * len(records)
    answered = [0]

    def done(i: int) -> Callable[[KafkaError | None, Message], None]:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            answered[0] += 1
            if err is None:
                results[i] = {"partition": msg.partition(), "offset": msg.offset()}
            else:
                results[i] = {"error": err.str()}

        return on_delivery

    for seq, rec in enumerate(records):
        args, kwargs = _record_args(txn_id, seq, rec)
        while True:
            try:
                producer.produce(*args, on_delivery=done(seq), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
    # Wait for these records only (flush() would wait for every record of every transaction the
    # shared producer holds); a poll thread may serve the callbacks, else this loop does.
    deadline = time.monotonic() + timeout_s
    while answered[0] < len(records) and time.monotonic() < deadline:
        producer.poll(0.002)
    return _all_acknowledged(txn_id, results)


def _record_args(txn_id: str, seq: int, rec: dict[str, Any]) -> tuple[tuple[str], dict[str, Any]]:
    headers: list[tuple[str, str | bytes | None]] = [
        (str(n), None if v is None else base64.b64decode(v)) for n, v in rec.get("headers") or ()
    ]
    headers += [("ferry-transaction-id", txn_id.encode()), ("ferry-transaction-seq", str(seq).encode())]
    key, value = rec.get("key_b64"), rec.get("value_b64")
    kwargs: dict[str, Any] = {
        "key": None if key is None else base64.b64decode(key),
        "value": None if value is None else base64.b64decode(value),
        "headers": headers,
    }
    if rec.get("partition") is not None:
        kwargs["partition"] = int(rec["partition"])
    return (rec["topic"],), kwargs


def _all_acknowledged(txn_id: str, results: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    if any(r is None or "error" in r for r in results):
        failed = [r for r in results if r is None or "error" in r]
        raise TxnLogError(
            f"transaction {txn_id}: {len(failed)} of {len(results)} records not acknowledged: {failed[:3]}"
        )
    return cast(list[dict[str, Any]], results)
