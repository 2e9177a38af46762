"""A gateway's live view of the transaction log: every entry since it started, by transaction.

Use case: a commit reads its transaction from the log twice (its state, then — after appending the
decision — every entry before that decision, so that the first decision in the log stands). Reading
a partition to its end costs a fetch round trip (~20 ms) and a consumer for the time. One
consumer per gateway instead follows
every partition of the log from where it was when the gateway started; a read then waits only until
this view has passed the offset it needs, and folds the entries it kept.

The view answers for a transaction only when it is sure to hold all of its entries: the prepare is
at or after where the view started in that partition, and the transaction was not evicted (the view
keeps at most :data:`MAX_TRANSACTIONS` transactions and :data:`MAX_BYTES` of entries, oldest first
out). Otherwise, or if the view does not get far enough within the wait, the caller reads the log
itself (:meth:`ferry.txnlog.TxnLog.read`). Entries are kept raw and decoded only when read.

States: starting (no partition's start known: answers nothing) → following (one thread consumes
and notifies waiters) → closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_END, KafkaError, TopicPartition

from ferry import kafka, log
from ferry.deadlines import time_out

_log = log.get_logger(__name__)
MAX_TRANSACTIONS = 50_000
MAX_BYTES = 64 * 1024 * 1024
POLL_S = 0.1
"""How long the following thread waits for a new entry before it looks whether it should stop."""
PAST_END_WAIT_S = 0.25
"""How long a reader waits at most for the view to pass an offset at or past the partition's end as
the view's last fetch saw it. An entry acknowledged since then arrives within a fetch or two; an
id naming no entry (made up, or from a lost log) would otherwise hold its caller for the whole
wait before the log is read and it is answered unknown."""


class TxnTail:
    """Follows a transaction log topic; ``entries(...)`` gives one transaction's raw entries."""

    def __init__(self, client_config: Mapping[str, Any], topic: str, partitions: int, fetch_wait_ms: int = 10) -> None:
        """``fetch_wait_ms``: how long the broker may hold a fetch that finds nothing new. Apache
        Kafka answers a held fetch as soon as an entry arrives, so a long wait only saves empty
        fetches; a broker that waits it out (the embedded one) adds up to this much to a commit."""
        self.topic = topic
        self._partitions = partitions
        self._consumer = kafka.reader({**client_config, "group.id": "ferry.txn-tail"}, "txn-tail", fetch_wait_ms)
        self._consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(partitions)])
        self._cond = threading.Condition()
        self.start: dict[int, int] = {}
        """Per partition, the first offset the view holds (known from its first fetch)."""
        self.position: dict[int, int] = {}
        """Per partition, the next offset the view will read: it holds everything below."""
        self.end: dict[int, int] = {}
        """Per partition, its end (high watermark) as the view's latest fetch saw it."""
        # id → [(offset, entry, its bytes here)]: a shared entry's bytes are split among its ids
        self._kept: OrderedDict[str, list[tuple[int, bytes, int]]] = OrderedDict()
        # Async readers waiting for a partition to pass an offset: (partition, need, loop, future).
        self._waiters: list[tuple[int, int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._bytes = 0
        self._running = True
        self._thread = threading.Thread(target=self._run, name="ferry-txn-tail", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._running = False
        self._thread.join(2.0)
        self._consumer.close()

    # --- the following thread ---------------------------------------------------------------

    def _run(self) -> None:
        while self._running:
            try:
                msgs = kafka.consume_ready(self._consumer, 500, POLL_S)
            except Exception as exc:  # a broken consumer: readers fall back to reading the log
                _log.warning("txn_tail.consume_failed", topic=self.topic, error=str(exc))
                continue
            ends = self._ends()
            with self._cond:
                self.end.update(ends)
                if not msgs:
                    continue
                for m in msgs:
                    self._take(m)
                self._evict()
                self._cond.notify_all()
                self._wake_waiters()

    def _ends(self) -> dict[int, int]:
        """Each partition's end as the latest fetch saw it (asked from this thread, which consumes)."""
        ends = {p: kafka.cached_high_watermark(self._consumer, self.topic, p) for p in range(self._partitions)}
        return {p: end for p, end in ends.items() if end is not None}

    def _take(self, m: Any) -> None:
        p, offset, err = m.partition(), m.offset(), m.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self.start.setdefault(p, offset)
                self.position[p] = max(self.position.get(p, offset), offset)
            return
        self.start.setdefault(p, offset)
        self.position[p] = offset + 1
        key, value = m.key(), m.value()
        if not key or value is None:
            return
        # A prepare is keyed by its nonce (its id is partition.offset.nonce); later entries by the
        # id; a `committed` entry shared by several transactions by all their ids (ferry.txn_committed).
        text = key.decode("ascii", "replace")
        if " " in text:
            ids = text.split(" ")
            for txn_id in ids:
                self._keep(txn_id, offset, value, len(value) // len(ids) + 1)
        else:
            self._keep(text if "." in text else f"{p}.{offset}.{text}", offset, value, len(value))

    def _keep(self, txn_id: str, offset: int, value: bytes, size: int) -> None:
        kept = self._kept.get(txn_id)
        if kept is None:
            kept = self._kept[txn_id] = []
        kept.append((offset, value, size))
        self._bytes += size

    def _evict(self) -> None:
        while self._kept and (len(self._kept) > MAX_TRANSACTIONS or self._bytes > MAX_BYTES):
            _, entries = self._kept.popitem(last=False)
            self._bytes -= sum(size for _, _, size in entries)

    def _wake_waiters(self) -> None:
        """(Under the lock.) Resolve the async readers whose partition passed their offset."""
        if not self._waiters:
            return
        still = []
        ready: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for waiter in self._waiters:
            partition, need, loop, fut = waiter
            if self.position.get(partition, 0) >= need:
                ready.setdefault(loop, []).append(fut)
            else:
                still.append(waiter)
        self._waiters = still
        for loop, futures in ready.items():  # one wake-up per loop, not per reader
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_resolve_all, futures)

    # --- readers ----------------------------------------------------------------------------

    def started(self, timeout_s: float) -> bool:
        """Wait until the view knows where it starts in every partition (its first fetches)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.start) == self._partitions, timeout_s)

    def entries(
        self, partition: int, prepare_offset: int, txn_id: str, up_to: int | None, wait_s: float
    ) -> list[bytes] | None:
        """The raw entries of ``txn_id`` in log order (up to and including offset ``up_to``), or
        None when the view cannot vouch for them: the caller reads the log. With ``up_to`` the view
        first waits (at most ``wait_s``) until it has read past it; without, until it has read past
        the prepare, and answers with what it holds then."""
        need = (up_to if up_to is not None else prepare_offset) + 1
        with self._cond:
            if not self._holds_from(partition, prepare_offset):
                return None
            wait_s = self._wait_for(partition, need, wait_s)
            if not self._cond.wait_for(lambda: self.position.get(partition, 0) >= need, wait_s):
                return None
            return self._kept_up_to(txn_id, prepare_offset, up_to)

    def _wait_for(self, partition: int, need: int, wait_s: float) -> float:
        """How long a reader waits for the view to reach ``need``: :data:`PAST_END_WAIT_S` at most
        when the partition's end, as the view last fetched it, is not past the offset needed."""
        end = self.end.get(partition, -1)
        return min(wait_s, PAST_END_WAIT_S) if 0 <= end < need else wait_s

    def _holds_from(self, partition: int, prepare_offset: int) -> bool:
        """(Under the lock.) Whether the view started in time to have read the whole transaction."""
        start = self.start.get(partition)
        return start is not None and prepare_offset >= start

    def _kept_up_to(self, txn_id: str, prepare_offset: int, up_to: int | None) -> list[bytes] | None:
        """(Under the lock, once the view is past what the reader needs.) The entries kept, the
        prepare first; None when the prepare is not among them: evicted (it was read, the view is
        past it), and what is kept came after that."""
        kept = self._kept.get(txn_id)
        if kept is None or kept[0][0] != prepare_offset:
            return None
        return [v for o, v, _ in kept if up_to is None or o <= up_to]

    def end_of(self, partition: int) -> int | None:
        """The partition's end as the view's latest fetch saw it (None: not known yet). Never past
        the partition's end, as long as the log is not deleted and made anew."""
        with self._cond:
            return self.end.get(partition)

    def has_read(self, partition: int, offset: int) -> bool:
        """Whether the view has read past ``offset`` of ``partition``."""
        with self._cond:
            return self.position.get(partition, 0) > offset

    async def entries_async(
        self, partition: int, prepare_offset: int, txn_id: str, up_to: int | None, wait_s: float
    ) -> list[bytes] | None:
        """:meth:`entries` for async code: waits on a future the following thread resolves, so a
        waiting reader holds no thread."""
        need = (up_to if up_to is not None else prepare_offset) + 1
        with self._cond:
            if not self._holds_from(partition, prepare_offset):
                return None
            ready = self.position.get(partition, 0) >= need
            if not ready:
                wait_s = self._wait_for(partition, need, wait_s)
                loop = asyncio.get_running_loop()
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters.append((partition, need, loop, fut))
        if not ready:
            try:
                await time_out(fut, wait_s)
            except TimeoutError:
                with self._cond:
                    self._waiters = [w for w in self._waiters if w[3] is not fut]
                return None
        with self._cond:
            return self._kept_up_to(txn_id, prepare_offset, up_to)


def _resolve_all(futures: list[asyncio.Future[None]]) -> None:
    for fut in futures:
        if not fut.done():
            fut.set_result(None)
