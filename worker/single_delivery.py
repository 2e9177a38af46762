"""One record per POST: a task per dispatchable record, from the window to its acknowledgement.

Use case: the :class:`ferry.worker.delivery.Delivery` of a subscription without ``batch``. Each
record's task:

    (delayed consumption: sleep until the record's time + delay_ms)
    wait for the lease → push → 2xx: acknowledge
                              → retry (policy): durable? hand it to the delay store and
                                acknowledge; else sleep the backoff (holding only its own key)
                                and push again
                              → dead letter: write it, then acknowledge

Records that are not due yet (the delay store's levels; ``ordering: none`` only) wait in the
window: the delivery starts only the due ones and sets a timer for the next (``waiting_for_time``
while that timer is all there is). States: running → closed (the timer cancelled).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ferry import log
from ferry.subscription import Subscription
from ferry.worker import durable_retry
from ferry.worker.delivery import DeliveryPort, count_again, leased, observe_latency
from ferry.worker.producer import ProduceFailed
from ferry.worker.push import Record
from ferry.worker.retry import parse_retry_after

_log = log.get_logger(__name__)


class SingleDelivery:
    def __init__(self, port: DeliveryPort) -> None:
        self._port = port
        self._hold_until = self._hold_rule(port.sub)
        self._wake: asyncio.TimerHandle | None = None
        self._warned_no_store = False

    def _hold_rule(self, sub: Subscription) -> Callable[[Record], float] | None:
        """When a record is due (epoch ms), for topics whose records wait for a time; else None."""
        port = self._port
        hold = getattr(port.ctx.client, "hold_until", None)
        return hold(sub, port.ref.topic, port.ref.partition) if hold is not None else None

    def update(self, sub: Subscription) -> None:
        self._hold_until = self._hold_rule(sub)

    @property
    def waiting_for_time(self) -> bool:
        return self._wake is not None

    def close(self) -> None:
        self._hold_until = None  # a hold keeps its head for the delay figures: let it go
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None

    def pump(self) -> None:
        port = self._port
        if self._hold_until is not None and port.window.ordering == "none":
            self._pump_due()
        else:
            for record in port.window.take():
                port.start_task(self._deliver(record))

    def _pump_due(self) -> None:
        """Start only the records whose time has come (a delay level, a consumer delay); wake up
        when the next one's has. The rest wait in the buffer, so the fetch pauses as it fills."""
        assert self._hold_until is not None
        port = self._port
        now_ms = port.ctx.wall_clock() * 1000
        records, held_ms = port.window.take_due(self._hold_until, now_ms)
        for record in records:
            port.start_task(self._deliver(record))
        if held_ms is not None and self._wake is None:
            self._wake = asyncio.get_running_loop().call_later((held_ms - now_ms) / 1000, self._woken)

    def _woken(self) -> None:
        self._wake = None
        self._port.pump()

    async def _deliver(self, record: Record) -> None:
        port = self._port
        sub = port.sub
        cluster = port.cluster_of(record)  # ce-kafkacluster: a retried copy keeps its first cluster
        first = record
        attempt = 0
        retry_copy = record.topic == sub.retry_topic
        if retry_copy:
            # A durable retry or a redriven dead letter: pushed as the record was first read, and
            # a durable retry counts on from the pushes already made.
            first, cluster = durable_retry.original(record, cluster)
            attempt = durable_retry.prior_attempts(record)
        # Where the record trace looks for it (a durable retry, a retry topic's record).
        where = (first.topic, first.partition, first.offset, cluster) if retry_copy else None
        dead = deferred = False
        live = port.live
        offset = record.offset
        last_status: int | None = None
        last_error: str | None = None
        if sub.delay_ms:  # delayed consumption: not before the record's time + delay_ms
            due_ms = record.timestamp_ms + sub.delay_ms
            hold_s = due_ms / 1000 - port.ctx.wall_clock()
            if hold_s > 0:
                live[offset] = ("waiting_retry", 0, None, "held by the subscription's delay_ms", due_ms)
                await asyncio.sleep(hold_s)
        lease = port.ctx.lease
        while True:
            if not lease.allowed():  # inline: a coroutine per push costs more than the check
                await leased(port)
            sub = port.sub  # a change applies from the next push on
            attempt += 1
            live[offset] = ("in_flight", attempt, last_status, last_error, None)
            if where is not None:
                port.retrying[where] = live[offset]
            if attempt > 1:
                count_again(port, 1)
                if retry_copy:
                    port.count_source(first, cluster, (0, 1, 0, 0))
            gate = port.ctx.gates.for_subscription(sub)
            at_send = await gate.acquire(port.ref) if gate is not None else 0
            started = time.monotonic()
            try:
                result = await port.ctx.client.push(sub, first, attempt, cluster)
            except BaseException:
                if gate is not None:
                    gate.abandon()
                raise
            latency = observe_latency(port, started)
            status = result.status
            if gate is not None:
                gate.release(latency, at_send, status)
            if status is not None and 200 <= status < 300:
                break
            if status is not None:
                wait_s = parse_retry_after(result.retry_after, port.ctx.wall_clock())
                decision = port.policy.after_status(attempt, status, wait_s)
            else:
                decision = port.policy.after_error(attempt, result.error or "no answer")
            if decision.action == "ack":
                break
            if decision.action == "dead_letter":
                await port.dead_letter(record, decision.reason, attempt)
                dead = True
                break
            last_status, last_error = status, (None if status is not None else result.error)
            due_at = None
            if sub.retry.mode == "durable":
                due_at = await self._defer(first, cluster, attempt, decision.delay_s)
            if due_at is not None:
                deferred = True  # it waits in the delay store: this copy is done
                where = where or (record.topic, record.partition, offset, cluster)
                port.retrying[where] = ("waiting_retry", attempt, last_status, last_error, due_at)
                break
            live[offset] = (
                "waiting_retry",
                attempt,
                last_status,
                last_error,
                int((port.ctx.wall_clock() + decision.delay_s) * 1000),
            )
            if where is not None:
                port.retrying[where] = live[offset]
            _log.info(
                "push.retry",
                subscription=sub.name,
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                attempt=attempt,
                delay_s=round(decision.delay_s, 3),
                reason=decision.reason,
            )
            await asyncio.sleep(decision.delay_s)
        live.pop(offset, None)
        if where is not None and not deferred:
            port.retrying[where] = ("done", attempt, None, None, int(port.ctx.wall_clock() * 1000))
        if retry_copy:
            port.count_source(first, cluster, (int(not (dead or deferred)), 0, int(dead), int(deferred)))
        port.acknowledged(record, dead, deferred)

    async def _defer(self, record: Record, cluster: str, attempts: int, delay_s: float) -> int | None:
        """Hand a record (as first read, from its Kafka cluster ``cluster``) whose retry is due in
        ``delay_s`` to the delay store (durable retries): when it is due (epoch ms); None when it
        must wait in memory instead (no delay store, or the broker refused it)."""
        port = self._port
        deferrals = port.ctx.deferrals
        if deferrals is None:
            if not self._warned_no_store:
                self._warned_no_store = True
                _log.warning(
                    "retry.durable_unavailable",
                    subscription=port.sub.name,
                    hint="durable retries need the delay store: set FERRY_INTERNAL_WORK=true; retrying in memory",
                )
            return None
        try:
            due_ms = int((port.ctx.wall_clock() + delay_s) * 1000)
            await deferrals.send(port.sub, record, attempts, due_ms, cluster)
        except ProduceFailed as exc:
            _log.error("retry.defer_failed", subscription=port.sub.name, offset=record.offset, error=str(exc))
            return None
        port.deferred += 1
        return due_ms
