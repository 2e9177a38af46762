"""The worker engine: owns partitions and delivers them, whatever tells it which to own.

Use case: a source (a static assignment file, or ZooKeeper through the coordinator) calls
``acquire``/``release``/``update_subscription``; the engine restores each partition's offset
state, fetches it with the shared consumer, pushes through the shared HTTP pool, and writes
merged offset state every ``offset_flush_interval_ms`` and on release.

Fencing: ``set_lease(deadline)`` stops new pushes once the deadline passes (the ZooKeeper
session may have expired); ``fence()`` drops everything at once without writing state, because
another worker may already own the partitions with a higher epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ferry import log
from ferry.config import Settings
from ferry.netguard import EndpointPolicy
from ferry.offsets import OffsetState
from ferry.subscription import PartitionRef, Subscription
from worker.deadletter import DeadLetterSink
from worker.fetch import TP, Batch, Fetcher
from worker.metrics import WorkerMetrics
from worker.offset_store import OffsetStore
from worker.partition import Context, Lease, PartitionRunner
from worker.producer import AsyncProducer
from worker.push import PushClient
from worker.start_offsets import StartOffsets

_log = log.get_logger(__name__)
MIN_PREFETCH_BYTES = 64 * 1024


def prefetch_bytes_per_partition(per_partition: int, budget: int, owned: int) -> int:
    """Each partition's prefetch bound: the per-partition setting, but at most an even share of the
    worker's budget, so a worker owning a thousand partitions holds no more than one owning ten."""
    return max(MIN_PREFETCH_BYTES, min(per_partition, budget // max(1, owned)))


class Engine:
    def __init__(self, settings: Settings, worker_id: str, *, metrics: WorkerMetrics | None = None) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.metrics = metrics or WorkerMetrics()
        self._kafka_cfg = settings.kafka.client_config(**{"fetch.wait.max.ms": settings.kafka.fetch_wait_max_ms})
        self._runners: dict[PartitionRef, PartitionRunner] = {}
        self._fetch_of: dict[PartitionRef, Fetcher] = {}
        self._routes: dict[tuple[str, TP], PartitionRunner] = {}
        self._fetchers: list[Fetcher] = []
        self._flush_task: asyncio.Task[None] | None = None
        self.started = False

    async def start(self) -> None:
        self._producer = AsyncProducer(self.settings.kafka.client_config())
        self._store = OffsetStore(
            self.settings.kafka.client_config(), self.settings.kafka.offsets_topic, self._producer
        )
        await asyncio.to_thread(self._store.ensure_topic)
        self._starts = StartOffsets(self.settings.kafka.client_config())
        self._client = PushClient(EndpointPolicy(self.settings.portal.endpoint_allow), self.settings.cluster)
        await self._client.start()
        self._lease = Lease()
        self._ctx = Context(
            worker_id=self.worker_id,
            client=self._client,
            dead_letters=DeadLetterSink(self.settings.kafka.client_config(), self._producer),
            metrics=self.metrics,
            lease=self._lease,
            prefetch_records=self.settings.worker.prefetch_records,
            prefetch_bytes=self.settings.worker.prefetch_bytes,
        )
        self._flush_task = asyncio.create_task(self._flush_loop())
        self.started = True
        _log.info("engine.started", worker=self.worker_id)

    # --- ownership -----------------------------------------------------------------------

    async def acquire(self, ref: PartitionRef, sub: Subscription, epoch: int | None) -> None:
        """Take a partition. ``epoch=None`` (static assignments only) adopts the restored epoch."""
        if ref in self._runners:
            runner = self._runners[ref]
            if epoch is not None:
                runner.epoch = max(runner.epoch, epoch)
            runner.update(sub)
            return
        started = time.monotonic()
        restored = await self._store.restore(ref)
        if epoch is None:
            epoch = restored.epoch if restored is not None else 0
        elif restored is not None and restored.epoch > epoch:
            _log.warning("partition.newer_state", key=ref.key(), epoch=epoch, restored_epoch=restored.epoch)
        anchored = restored is None
        if restored is None:
            # First owner ever: make the start durable before the first push (see worker.start_offsets).
            start = await self._starts.resolve((ref.topic, ref.partition), sub.start_from)
            restored = OffsetState(start, (), epoch, self.worker_id, int(time.time() * 1000))
            await self._store.write(ref, restored, sub.group_id)
        fetcher = self._fetcher_for((ref.topic, ref.partition))
        tp = (ref.topic, ref.partition)
        runner = PartitionRunner(
            ref,
            sub,
            epoch,
            self._ctx,
            restored,
            pause=lambda: fetcher.pause(tp),
            resume=lambda: fetcher.resume(tp),
        )
        self._runners[ref] = runner
        self._fetch_of[ref] = fetcher
        self._routes[(fetcher.name, tp)] = runner
        fetcher.assign(tp, restored.committed)
        self._owned_changed()
        self.metrics.handoffs.labels(direction="acquired").inc()
        _log.info(
            "partition.acquired",
            key=ref.key(),
            epoch=epoch,
            committed=restored.committed,
            acked_ranges=len(restored.acked),
            anchored=anchored,
            restore_ms=int((time.monotonic() - started) * 1000),
        )

    def _owned_changed(self) -> None:
        w = self.settings.worker
        self._ctx.prefetch_bytes = prefetch_bytes_per_partition(
            w.prefetch_bytes, w.prefetch_budget_bytes, len(self._runners)
        )
        self.metrics.owned.set(len(self._runners))

    def _fetcher_for(self, tp: TP) -> Fetcher:
        for f in self._fetchers:
            if tp not in f.assigned:
                return f
        f = Fetcher(self._kafka_cfg, f"{self.worker_id}-{len(self._fetchers)}", self._on_batch)
        f.start(asyncio.get_running_loop())
        self._fetchers.append(f)
        return f

    def _on_batch(self, fetcher: Fetcher, batch: Batch) -> None:
        for tp in set(batch.records) | set(batch.eof):
            runner = self._routes.get((fetcher.name, tp))
            if runner is None:
                continue  # released meanwhile
            runner.feed(batch.records.get(tp, []), batch.high_watermarks.get(tp), batch.eof.get(tp))

    async def release(self, ref: PartitionRef, drain_timeout_ms: int | None = None) -> None:
        runner = self._runners.pop(ref, None)
        if runner is None:
            return
        started = time.monotonic()
        fetcher = self._fetch_of.pop(ref)
        tp = (ref.topic, ref.partition)
        fetcher.unassign(tp)
        self._routes.pop((fetcher.name, tp), None)
        drain_ms = self.settings.worker.drain_timeout_ms if drain_timeout_ms is None else drain_timeout_ms
        await runner.release(drain_ms / 1000)
        await self._write(runner)
        await self._store.commit_groups()
        self._owned_changed()
        self.metrics.handoffs.labels(direction="released").inc()
        with contextlib.suppress(KeyError):
            self.metrics.lag.remove(ref.subscription, ref.topic, str(ref.partition))
        _log.info(
            "partition.released",
            key=ref.key(),
            epoch=runner.epoch,
            committed=runner.merge.committed if runner.merge else None,
            release_ms=int((time.monotonic() - started) * 1000),
        )

    async def update_subscription(self, sub: Subscription) -> None:
        for ref, runner in self._runners.items():
            if ref.subscription == sub.name:
                runner.update(sub)

    def set_lease(self, deadline_monotonic: float | None) -> None:
        self._lease.set(deadline_monotonic)

    async def fence(self) -> None:
        runners = list(self._runners.values())
        for ref, fetcher in self._fetch_of.items():
            fetcher.unassign((ref.topic, ref.partition))
        self._runners.clear()
        self._fetch_of.clear()
        self._routes.clear()
        await asyncio.gather(*(r.fence() for r in runners))
        self._owned_changed()
        _log.warning("engine.fenced", worker=self.worker_id, partitions=len(runners))

    def owned(self) -> dict[PartitionRef, int]:
        return {ref: r.epoch for ref, r in self._runners.items()}

    def stats(self) -> list[dict[str, Any]]:
        return [r.stats() for r in self._runners.values()]

    # --- offsets -------------------------------------------------------------------------

    async def _write(self, runner: PartitionRunner) -> None:
        state = runner.state()
        if state is None:
            return
        runner.dirty = False
        try:
            await self._store.write(runner.ref, state, runner.sub.group_id)
        except Exception as exc:
            runner.dirty = True
            _log.error("offsets.write_failed", key=runner.ref.key(), error=str(exc))
            return
        self.metrics.commits.labels(subscription=runner.ref.subscription).inc()

    async def _flush_loop(self) -> None:
        interval_s = self.settings.worker.offset_flush_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            dirty = [r for r in self._runners.values() if r.dirty]
            await asyncio.gather(*(self._write(r) for r in dirty))
            await self._store.commit_groups()
            in_flight: dict[str, int] = {}
            for r in self._runners.values():
                s = r.stats()
                in_flight[r.ref.subscription] = in_flight.get(r.ref.subscription, 0) + s["in_flight"]
                if s["lag"] is not None:
                    self.metrics.lag.labels(r.ref.subscription, r.ref.topic, str(r.ref.partition)).set(s["lag"])
            for name, n in in_flight.items():
                self.metrics.in_flight.labels(name).set(n)

    async def stop(self, drain_timeout_ms: int | None = None) -> None:
        """Release everything gracefully (drains in parallel), then close the clients."""
        await asyncio.gather(*(self.release(ref, drain_timeout_ms) for ref in list(self._runners)))
        if self._flush_task is not None:
            self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        for f in self._fetchers:
            await asyncio.to_thread(f.stop)
        await self._client.close()
        self._starts.close()
        await asyncio.to_thread(self._producer.close)
        self._store.close()
        _log.info("engine.stopped", worker=self.worker_id)
