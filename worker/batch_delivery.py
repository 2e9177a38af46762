"""Batch push mode, the driving half: take batches from a partition's window and see each one through.

Use case: the :class:`ferry.worker.delivery.Delivery` of a subscription with ``batch`` set. One
asyncio task per batch in flight (never per record); a batch that another's acknowledgement lets
start is pushed by that batch's task at once:

    push the batch → read the answer (:func:`worker.batch.interpret`)
      split (413, or a non-retryable 4xx for several records): push each half in turn, and
          send at most half as many records per batch from then on (until the subscription changes)
      otherwise decide per record (:func:`worker.batch.settle`):
          dead-letter the dead ones, then acknowledge them with the acked ones (one merge pass);
          the retried and held ones are pushed again as a smaller batch, in offset order, after
          the longest of their delays; their lanes stay busy meanwhile, so no later record of
          their key overtakes them.

A retry topic's batch holding two copies of one record (redriven twice: one first-read place,
one event id) is pushed as consecutive runs of unique ids (:func:`worker.batch.distinct_id_runs`),
so per-record results can name each event once.

Attempts: ``ferryattempt`` counts every push of a record; ``retry.max_attempts`` counts the
pushes the record itself failed (a record held behind another one, or pushed again because its
batch was split, is not charged). ``linger_ms`` holds a partial batch back until ``max_records``
records are buffered or ``linger_ms`` passed.
"""

from __future__ import annotations

import asyncio
import time
from operator import attrgetter

from ferry import log
from ferry.subscription import BatchSpec, Subscription
from ferry.worker import durable_retry
from ferry.worker.batch import (
    MAX_ANSWER_BYTES,
    EventEncoder,
    distinct_id_runs,
    encode_batch,
    event_id,
    event_size,
    interpret,
    settle,
)
from ferry.worker.delivery import DeliveryPort, count_again, leased, observe_latency
from ferry.worker.push import Record
from ferry.worker.retry import parse_retry_after

_log = log.get_logger(__name__)


# Record.size (value + key + 64) bounds event_size(): event_size(r) <= 3 * r.size + 128.
_raw_size = attrgetter("size")


def _as_first_read(records: list[Record], cluster: str) -> tuple[list[Record], list[str]]:
    """Records of a retry topic (in ``cluster``) as first read, and the Kafka cluster of each."""
    firsts = [durable_retry.original(r, cluster) for r in records]
    return [f.record for f in firsts], [f.cluster for f in firsts]


class BatchDelivery:
    def __init__(self, runner: DeliveryPort, spec: BatchSpec) -> None:
        self._runner = runner
        self.spec = spec
        self.cap = spec.max_records
        self._encoder = EventEncoder(runner.ctx.client.cluster, runner.sub.name, runner.ref.cluster)
        self._encoders: dict[str, EventEncoder] = {runner.ref.cluster: self._encoder}
        """By Kafka cluster: a retry topic's records of another cluster say theirs (docs/zones.md)."""
        self._linger: asyncio.TimerHandle | None = None
        self._linger_due = False
        # While a batch's task acknowledges it: the batches that frees, for that task to push next.
        self._claimed: list[list[Record]] | None = None

    def _encode_by_cluster(self, records: list[Record], pushes: list[int], clusters: list[str]) -> bytes:
        """The batch body of records of several Kafka clusters (a retry topic's: each as first
        read), each event with its own cluster's ``kafkacluster``, in the order given."""
        if all(c == self._runner.ref.cluster for c in clusters):
            return encode_batch(self._encoder, records, pushes)
        parts: list[bytes] = []
        start = 0
        for i in range(1, len(records) + 1):
            if i == len(records) or clusters[i] != clusters[start]:
                encoder = self._encoders.get(clusters[start])
                if encoder is None:
                    encoder = self._encoders[clusters[start]] = EventEncoder(
                        self._runner.ctx.client.cluster, self._runner.sub.name, clusters[start]
                    )
                parts.append(encode_batch(encoder, records[start:i], pushes[start:i])[1:-1])
                start = i
        return b"[" + b",".join(parts) + b"]"

    def update(self, sub: Subscription) -> None:
        spec = sub.batch
        if spec is not None and spec != self.spec:
            self.spec = spec
            self.cap = spec.max_records

    @property
    def waiting_for_time(self) -> bool:
        return False  # a linger is a wait for records, not for time: the watermark is not held

    def pump(self) -> None:
        """Start every batch the window allows now."""
        runner = self._runner
        window = runner.window
        if self.spec.linger_ms and not self._linger_due and window.pending < self.cap:
            if window.pending and self._linger is None:
                self._linger = asyncio.get_running_loop().call_later(self.spec.linger_ms / 1000, self._lingered)
            return
        self._linger_due = False
        while True:
            records = window.take_batch(self.cap, self.spec.max_bytes, event_size, _raw_size)
            if not records:
                return
            if self._claimed is not None:
                self._claimed.append(records)
            else:
                runner.start_task(self._deliver(records))

    def _lingered(self) -> None:
        self._linger = None
        self._linger_due = True
        self._runner.pump()

    def close(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    async def _deliver(self, records: list[Record]) -> None:
        """See a batch through, then the next one its acknowledgement let start, and so on: the
        next batch goes out at once instead of waiting a turn of the event loop for a task."""
        next_batch: list[Record] | None = records
        while next_batch:
            n = len(next_batch)
            next_batch = await self._see_through(next_batch, [0] * n, [0] * n, top=True)

    def _acknowledge_and_claim(self, records: list[Record]) -> list[Record] | None:
        """Acknowledge a whole batch; of the batches that lets start, return the first (the caller
        pushes it) and start the others as tasks of their own."""
        claimed: list[list[Record]] = []
        self._claimed = claimed
        try:
            self._runner.acknowledged_many(records, dead=False)
        except BaseException:
            claimed.insert(0, [])  # nothing is returned: every batch taken gets a task
            raise
        finally:
            self._claimed = None
            for extra in claimed[1:]:
                self._runner.start_task(self._deliver(extra))
        return claimed[0] if claimed else None

    async def _see_through(
        self, records: list[Record], pushes: list[int], charged: list[int], top: bool = False
    ) -> list[Record] | None:
        """Push ``records`` until each is acknowledged or dead-lettered. ``top``: the batch as
        first taken (not a part of a split one): returns the batch its acknowledgement let start."""
        runner = self._runner
        ctx = runner.ctx
        if runner.ref.topic == runner.sub.retry_topic and len(records) > 1:
            runs = distinct_id_runs([event_id(r) for r in _as_first_read(records, runner.ref.cluster)[0]])
            if len(runs) > 1:  # two copies of one record: never one id twice in a batch
                for i, j in runs:
                    await self._see_through(records[i:j], pushes[i:j], charged[i:j])
                return None
        while records:
            await leased(runner)
            if any(pushes):
                pushes = [p + 1 for p in pushes]
                count_again(runner, sum(1 for p in pushes if p > 1))
            else:  # every record's first push (the common case): no per-record Python loop
                pushes = [1] * len(records)
            # Records of the retry topic (redriven dead letters) as first read: their events are
            # theirs, not the retry topic's.
            if runner.ref.topic != runner.sub.retry_topic:
                shown = records
                body = encode_batch(self._encoder, shown, pushes)
            else:
                shown, clusters = _as_first_read(records, runner.ref.cluster)
                body = self._encode_by_cluster(shown, pushes, clusters)
            gate = ctx.gates.for_subscription(runner.sub)
            at_send = await gate.acquire(runner.ref) if gate is not None else 0
            started = time.monotonic()
            try:
                result = await ctx.client.push_batch(runner.sub, body, MAX_ANSWER_BYTES)
            except BaseException:
                if gate is not None:
                    gate.abandon()
                raise
            latency = observe_latency(runner, started)
            status = result.status
            if gate is not None:
                gate.release(latency, at_send, status)
            if status is not None and 200 <= status < 300 and not result.body.lstrip().startswith(b"{"):
                # The common case (interpret() agrees).
                if top:
                    return self._acknowledge_and_claim(records)
                runner.acknowledged_many(records, dead=False)
                return None
            ids = [event_id(r) for r in shown]
            verdict = interpret(result.status, result.body, result.truncated, ids, result.error)
            if verdict.kind == "split":
                half = len(records) // 2
                if verdict.statuses[0] == 413:
                    self.cap = max(1, min(self.cap, half))  # too large: remembered for this partition
                size = min(self.cap, (len(records) + 1) // 2)  # another 4xx: bisect to the refused records
                _log.warning(
                    "batch.split",
                    subscription=runner.sub.name,
                    topic=runner.ref.topic,
                    partition=runner.ref.partition,
                    records=len(records),
                    reason=verdict.reasons[0],
                    max_records_now=self.cap,
                )
                # In order, chunk by chunk; after another 413 the rest goes in smaller chunks.
                i = 0
                while i < len(records):
                    j = i + min(size, self.cap)
                    await self._see_through(records[i:j], pushes[i:j], charged[i:j])
                    i = j
                return None
            wait_s = parse_retry_after(result.retry_after, ctx.wall_clock())
            lanes = [runner.window.lane(r) for r in records]
            charged_now = [c + 1 for c in charged]
            decisions = settle(verdict, lanes, charged_now, runner.policy, wait_s)
            done: list[Record] = []
            dead: list[Record] = []
            again_records: list[Record] = []
            again_pushes: list[int] = []
            again_charged: list[int] = []
            delay = 0.0
            reason = ""
            for i, d in enumerate(decisions):
                if d.action == "ack":
                    done.append(records[i])
                elif d.action == "dead_letter":
                    await runner.dead_letter(records[i], d.reason, charged_now[i])
                    dead.append(records[i])
                else:
                    again_records.append(records[i])
                    again_pushes.append(pushes[i])
                    again_charged.append(charged_now[i] if d.action == "retry" else charged[i])
                    if d.action == "retry":
                        delay = max(delay, d.delay_s)
                        reason = reason or d.reason
            if dead:
                runner.acknowledged_many(dead, dead=True)
            if done:
                runner.acknowledged_many(done, dead=False)
            if again_records:
                _log.info(
                    "batch.retry",
                    subscription=runner.sub.name,
                    topic=runner.ref.topic,
                    partition=runner.ref.partition,
                    records=len(again_records),
                    first_offset=again_records[0].offset,
                    delay_s=round(delay, 3),
                    reason=reason,
                )
                await asyncio.sleep(delay)
            records, pushes, charged = again_records, again_pushes, again_charged
        return None
