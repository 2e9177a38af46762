"""One owned partition: fetched records → ordering window → pushes with retries → offset merge.

Use case: everything a worker does for one (subscription, topic, partition) between acquiring
and releasing it: feed fetched records through the filter into the ordering window, merge
acknowledgements into the offset state, slow the fetch down as the buffer fills
(:mod:`ferry.worker.backpressure`). Records
already acknowledged before a restore are skipped, never pushed again. What happens between
the window and the acknowledgement is the partition's :class:`ferry.worker.delivery.Delivery` —
one record per POST (:class:`ferry.worker.single_delivery.SingleDelivery`) or batches
(:class:`ferry.worker.batch_delivery.BatchDelivery`, ``sub.batch`` set) — working through the
narrow port this runner offers it (:class:`ferry.worker.delivery.DeliveryPort`).

States: running → (paused: subscription paused, nothing new starts) → closing (release: no new
pushes, in-flight ones get the drain timeout) → closed. ``fence()`` jumps straight to closed,
aborting in-flight pushes and writing nothing: another owner may already hold a higher epoch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from operator import attrgetter
from typing import Any

from ferry import log
from ferry.clock import now_ms
from ferry.errors import ConfigError
from ferry.kafka import KafkaUnavailable
from ferry.offsets import OffsetState
from ferry.subscription import PartitionRef, Subscription
from ferry.worker import admission, durable_retry
from ferry.worker.backpressure import Gate, next_gate
from ferry.worker.batch_delivery import BatchDelivery
from ferry.worker.context import Context
from ferry.worker.deadletter import DeadLetterSink
from ferry.worker.delivery import Delivery
from ferry.worker.offset_merge import OffsetMerge
from ferry.worker.producer import ProduceFailed
from ferry.worker.push import Record
from ferry.worker.retry import RetryPolicy
from ferry.worker.single_delivery import SingleDelivery
from ferry.worker.stall import Stall
from ferry.worker.window import Window

_log = log.get_logger(__name__)
_offset = attrgetter("offset")
_size = attrgetter("size")

LIVE_SHOWN = 200
"""Records being pushed that a partition's stats list for the record trace (lowest offsets first)."""

RETRYING_KEPT_MS = 60_000
"""How long a partition's stats keep a durable retry's wait after it is due (until the retry
topic's owner shows the record being pushed), and a retry's end after it (so that this older word
is not taken as the latest)."""

SOURCES_SHOWN = 1000
"""Source partitions a retry topic's partition counts for (more stay on its own row)."""

STALL_LOG_S = 60.0
"""A watermark held this long is logged (once, and once more when it moves again)."""


class PartitionRunner:
    def __init__(
        self,
        ref: PartitionRef,
        sub: Subscription,
        epoch: int,
        ctx: Context,
        restored: OffsetState | None,
        gate: Callable[[Gate], None],
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.ref = ref
        self.dead_letters = dead_letters or ctx.dead_letters
        """Where this partition's dead letters go: the dead-letter topic in its own Kafka cluster."""
        self.sub = sub
        self.epoch = epoch
        self.ctx = ctx
        self._set_gate = gate
        self._gate = Gate.OPEN
        self.policy = RetryPolicy(sub.retry)
        self.window: Window[Record] = Window(sub.ordering, sub.max_in_flight)
        # Unknown until a restore or the first fetched offset says where this partition starts.
        self.merge: OffsetMerge | None = None
        self.next_offset: int | None = None
        # Below this offset a fetched record may already be acknowledged (restored acked ranges);
        # from it on nothing is, so feed() need not ask the merge record by record.
        self._restored_end = 0
        if restored is not None:
            self.merge = OffsetMerge(restored.committed, restored.acked)
            self.next_offset = restored.committed
            self._restored_end = max((hi for _, hi in restored.acked), default=0)
        self.high_watermark: int | None = None
        self.buffered_bytes = 0
        self.delivered = self.retried = self.dead_lettered = self.filtered = self.deferred = 0
        self.by_source: dict[tuple[str, int, str], list[int]] = {}
        """A retry topic's counts by where its records were first read: (topic, partition,
        Kafka cluster) → [delivered, retried, dead_lettered, deferred], included in the counters
        above; the status shows them on those partitions' rows."""
        # What the record trace shows of records being pushed: offset → (state, attempts, last
        # status, last error, next attempt at epoch ms).
        self.live: dict[int, tuple[str, int, int | None, str | None, int | None]] = {}
        self.retrying: dict[tuple[str, int, int, str], tuple[str, int, int | None, str | None, int | None]] = {}
        """The same for records acknowledged in the partition they were first read from, by that
        place (topic, partition, offset, Kafka cluster): a durable retry waiting in the delay
        store until its next attempt, a record of the retry topic being pushed, and (``done``, with
        when) one the retry topic's runner finished."""
        self.dirty = False
        self.closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._stall = Stall()
        # Metric children resolved once: a labels() lookup per record costs more than the push bookkeeping.
        m = ctx.metrics
        self._m_delivered = m.delivered.labels(sub.name)
        self.m_retried = m.retried.labels(sub.name)
        self._m_dead = m.dead_lettered.labels(sub.name)
        self._m_filtered = m.filtered.labels(sub.name)
        self._m_gates = {g: m.fetch_gates.labels(sub.name, g.name.lower()) for g in Gate}
        self.admission = admission.for_subscription(sub, ctx.client.cluster, ref.topic, ref.partition)
        self.m_latency = m.push_latency.labels(sub.name)
        self.delivery: Delivery = self._delivery_for(sub)

    # --- input ---------------------------------------------------------------------------

    def feed(self, records: list[Record], high_watermark: int | None, eof: int | None) -> None:
        if self.closing:
            return
        if records:
            first, last = records[0].offset, records[-1].offset
            if (
                self.merge is not None
                and first == self.next_offset
                and last - first + 1 == len(records)
                and first >= self._restored_end
            ):
                # The common case: the next offsets, no holes, none acknowledged yet.
                self.next_offset = last + 1
                if self.admission.active:
                    records, rejected = self.admission.split(records)
                    if rejected:
                        self._filtered_out(rejected)
                self.window.add_many(records)
                self.buffered_bytes += sum(map(_size, records))
            else:
                self._feed_each(records)
        if eof is not None:
            if self.merge is None:
                self.merge = OffsetMerge(eof)
                self.dirty = True
            elif self.next_offset is not None and eof > self.next_offset:
                self.merge.ack_range(self.next_offset, eof)
                self.dirty = True
            self.next_offset = max(self.next_offset or 0, eof)
            self.high_watermark = eof
        if high_watermark is not None:
            self.high_watermark = max(self.high_watermark or 0, high_watermark)
        self.pump()

    def _feed_each(self, records: list[Record]) -> None:
        """Record by record: after a re-seek, across holes in the log, or over restored acks."""
        merge, next_offset, add = self.merge, self.next_offset, self.window.add
        admission = self.admission if self.admission.active else None
        added = filtered = 0
        for r in records:
            offset = r.offset
            if next_offset is not None and offset < next_offset:
                continue  # fetched before a re-seek: already seen
            if merge is None:
                merge = self.merge = OffsetMerge(offset)
            elif next_offset is not None and offset > next_offset:
                # Offsets the log does not hold (compaction, transaction markers): nothing to deliver.
                merge.ack_range(next_offset, offset)
                self.dirty = True
            next_offset = offset + 1
            if merge.is_acked(offset):
                continue
            if admission is not None and not admission.admits(r):
                merge.ack(offset)  # the endpoint does not want it: done without a push
                filtered += 1
                continue
            add(r)
            added += r.size
        self.next_offset = next_offset
        self.buffered_bytes += added
        if filtered:
            self.filtered += filtered
            self._m_filtered.inc(filtered)
            self.dirty = True

    def _filtered_out(self, records: list[Record]) -> None:
        """Records the filter rejected: acknowledged without a push, and counted."""
        assert self.merge is not None
        ack = self.merge.ack
        for r in records:
            ack(r.offset)
        self.filtered += len(records)
        self._m_filtered.inc(len(records))
        self.dirty = True

    def _delivery_for(self, sub: Subscription) -> Delivery:
        return BatchDelivery(self, sub.batch) if sub.batch is not None else SingleDelivery(self)

    def update(self, sub: Subscription) -> None:
        self.sub = sub
        self.admission = admission.for_subscription(
            sub, self.ctx.client.cluster, self.ref.topic, self.ref.partition, self.admission
        )
        self.policy = RetryPolicy(sub.retry)
        if (sub.ordering, sub.max_in_flight) != (self.window.ordering, self.window.max_in_flight):
            self.window.reconfigure(sub.ordering, sub.max_in_flight)
        if isinstance(self.delivery, BatchDelivery) != (sub.batch is not None):
            # Batch mode turned on or off: in-flight pushes finish as they started.
            self.delivery.close()
            self.delivery = self._delivery_for(sub)
        else:
            self.delivery.update(sub)
        self.pump()

    # --- dispatch ------------------------------------------------------------------------

    def pump(self) -> None:
        if not self.closing and self.sub.state == "active":
            self.delivery.pump()
        gate = next_gate(
            self._gate, self.window.pending, self.buffered_bytes, self.ctx.prefetch_records, self.ctx.prefetch_bytes
        )
        if gate is not self._gate:
            self._gate = gate
            self._set_gate(gate)
            self._m_gates[gate].inc()

    def start_task(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cluster_of(self, record: Record) -> str:
        """The Kafka cluster ``record`` belongs to: its partition's, or for a copy in the retry
        topic (always in ``default``), the cluster it was first read in (``ferry-source-cluster``)."""
        if record.topic == self.sub.retry_topic:
            return durable_retry.source_cluster(record, self.ref.cluster)
        return self.ref.cluster

    async def dead_letter(self, record: Record, reason: str, attempts: int) -> None:
        """Dead-letter ``record`` in its own Kafka cluster (:meth:`cluster_of`); returns once the
        broker confirmed it, trying again until then."""
        delay_s = 0.5
        kafka_cluster = self.cluster_of(record)
        if record.topic == self.sub.retry_topic:  # the dead letter names where it was first read
            record = durable_retry.original(record, kafka_cluster).record
        elsewhere = kafka_cluster != self.ref.cluster and self.ctx.dead_letters_in is not None
        while True:
            try:
                if elsewhere:
                    assert self.ctx.dead_letters_in is not None
                    async with self.ctx.dead_letters_in(kafka_cluster) as sink:
                        await sink.send(self.sub.dead_letter_topic, record, reason, attempts, None, kafka_cluster)
                else:
                    await self.dead_letters.send(
                        self.sub.dead_letter_topic, record, reason, attempts, None, kafka_cluster
                    )
                return
            except ConfigError as exc:
                # The record's cluster left FERRY_KAFKA_CLUSTERS: keep the dead letter here, its
                # ferry-source-cluster header still naming that cluster.
                _log.error(
                    "dead_letter.unknown_cluster",
                    subscription=self.sub.name,
                    offset=record.offset,
                    cluster=kafka_cluster,
                    dead_letter_cluster=self.ref.cluster,
                    error=str(exc),
                    hint="give every worker the same FERRY_KAFKA_CLUSTERS as the portal that redrove the record",
                )
                elsewhere = False
            except (ProduceFailed, KafkaUnavailable) as exc:
                # Not acknowledged until the dead letter is safe: keep trying, holding only this key.
                _log.error(
                    "dead_letter.failed",
                    subscription=self.sub.name,
                    offset=record.offset,
                    cluster=kafka_cluster,
                    error=str(exc),
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, 30)

    def count_source(self, first: Record, cluster: str, counts: tuple[int, int, int, int]) -> None:
        """Counts of a record of the retry topic, for the row of where it was first read."""
        key = (first.topic, first.partition, cluster)
        found = self.by_source.get(key)
        if found is None:
            if len(self.by_source) >= SOURCES_SHOWN:
                return  # left on the retry topic's own row
            found = self.by_source[key] = [0, 0, 0, 0]
        for i, n in enumerate(counts):
            found[i] += n

    def acknowledged(self, record: Record, dead: bool, deferred: bool = False) -> None:
        assert self.merge is not None
        self.merge.ack(record.offset)
        self.window.finish(record)
        self.buffered_bytes -= record.size
        self.dirty = True
        if deferred:
            pass  # counted when deferred; its delivery is counted where it is pushed again
        elif dead:
            self.dead_lettered += 1
            self._m_dead.inc()
        else:
            self.delivered += 1
            self._m_delivered.inc()
        self.pump()

    def acknowledged_many(self, records: list[Record], dead: bool) -> None:
        """A batch's settled records (acknowledged or dead-lettered, ascending offsets): one pass, one pump."""
        assert self.merge is not None
        offsets = list(map(_offset, records))
        self.merge.ack_many(offsets)
        self.window.finish_offsets(offsets)
        self.buffered_bytes -= sum(map(_size, records))
        self.dirty = True
        n = len(records)
        if dead:
            self.dead_lettered += n
            self._m_dead.inc(n)
        else:
            self.delivered += n
            self._m_delivered.inc(n)
        self.pump()

    # --- state and shutdown --------------------------------------------------------------

    def state(self) -> OffsetState | None:
        if self.merge is None:
            return None
        return OffsetState(
            committed=self.merge.committed,
            acked=self.merge.acked,
            epoch=self.epoch,
            worker=self.ctx.worker_id,
            ts=now_ms(),
        )

    async def release(self, drain_timeout_s: float) -> None:
        """Stop starting pushes; give in-flight ones up to the drain timeout; abandon the rest
        (they stay unacknowledged and the next owner delivers them)."""
        self.closing = True
        self.delivery.close()
        self.window.clear()
        if self._tasks:
            _, still = await asyncio.wait(set(self._tasks), timeout=drain_timeout_s)
            if still:
                _log.warning("partition.drain_timeout", key=self.ref.label(), abandoned=len(still))
                await self._cancel(still)

    async def fence(self) -> None:
        self.closing = True
        self.delivery.close()
        self.window.clear()
        await self._cancel(set(self._tasks))

    @staticmethod
    async def _cancel(tasks: set[asyncio.Task[None]]) -> None:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def observe_stall(self, now: float) -> float:
        """Sample the watermark stall (worker.stall): records held unacknowledged at or above the
        watermark while it does not move. Logged once past :data:`STALL_LOG_S` and once when it
        ends, so a head-of-line block is one line in the log, not one per sample."""
        working = self.sub.state == "active" and not self.closing
        working = working and (self.window.in_flight > 0 or self.window.pending > 0)
        # Records not yet due (a delay level, a consumer delay) hold nothing up.
        working = working and not (self.delivery.waiting_for_time and self.window.in_flight == 0)
        committed = self.merge.committed if self.merge is not None else None
        self._stall.observe(committed, working, now)
        event = self._stall.report(STALL_LOG_S)
        if event == "began":
            _log.warning(
                "partition.watermark_stalled",
                key=self.ref.label(),
                committed=committed,
                stalled_s=round(self._stall.held_s, 1),
                in_flight=self.window.in_flight,
                buffered=self.window.pending,
                hint="the record at offset `committed` is not settled: the endpoint keeps failing it (see"
                " ferry_records_retried_total) or its dead letter is not confirmed; the partition's"
                " progress waits for it",
            )
        elif event == "ended":
            held_s = round(self._stall.longest_s, 1)
            _log.info("partition.watermark_moving", key=self.ref.label(), committed=committed, held_s=held_s)
        return self._stall.held_s

    def _retrying(self) -> list[list[Any]]:
        """:attr:`retrying` for the stats, at most :data:`LIVE_SHOWN` of them (ends dropped first).
        A wait stays until :data:`RETRYING_KEPT_MS` after it is due: the retry topic's owner shows
        the record once it fetches it, and its word is the later one (more attempts). An end
        (``done``: delivered or dead-lettered through the retry topic) stays as long, to outrank
        the wait it followed; the record trace then looks no further than the offset state."""
        over = now_ms() - RETRYING_KEPT_MS
        stale = [k for k, v in self.retrying.items() if v[0] != "in_flight" and (v[4] or 0) <= over]
        for k in stale:
            del self.retrying[k]
        if len(self.retrying) > LIVE_SHOWN:
            ends = [k for k, v in self.retrying.items() if v[0] == "done"]
            for k in ends[: len(self.retrying) - LIVE_SHOWN]:
                del self.retrying[k]
        while len(self.retrying) > LIVE_SHOWN:
            del self.retrying[next(iter(self.retrying))]
        return [[*k, *v] for k, v in self.retrying.items()]

    def stats(self) -> dict[str, Any]:
        committed = self.merge.committed if self.merge is not None else None
        hw = self.high_watermark
        return {
            "subscription": self.ref.subscription,
            "topic": self.ref.topic,
            "partition": self.ref.partition,
            "cluster": self.ref.cluster,
            "epoch": self.epoch,
            "committed": committed,
            "high_watermark": hw,
            "lag": max(0, hw - committed) if hw is not None and committed is not None else None,
            "in_flight": self.window.in_flight,
            "buffered": self.window.pending,
            "fetch": self._gate.name.lower(),
            "acked_ranges": self.merge.gaps if self.merge is not None else 0,
            "stalled_s": round(self._stall.held_s, 1),
            "delivered": self.delivered,
            "retried": self.retried,
            "dead_lettered": self.dead_lettered,
            "filtered": self.filtered,
            "deferred": self.deferred,
            "filter_errors": self.admission.errors,
            "filter": self.admission.document,
            "live": [[o, *v] for o, v in sorted(self.live.items())[:LIVE_SHOWN]],
            **({"retrying": self._retrying()} if self.retrying else {}),
            **({"sources": [[*k, *v] for k, v in self.by_source.items()]} if self.by_source else {}),
        }
