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
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from ferry import log
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.kafka import KafkaUnavailable
from ferry.offsets import OffsetState
from ferry.subscription import DEFAULT_CLUSTER, INTERNAL_PREFIX, PartitionRef, Subscription
from ferry.worker import tracing
from ferry.worker.backpressure import Gate, consume_batch
from ferry.worker.blocking import close_within
from ferry.worker.context import Context, Lease
from ferry.worker.deadletter import DeadLetterSink
from ferry.worker.durable_retry import Deferrals
from ferry.worker.fetch import TP, Batch, Fetcher
from ferry.worker.kafka_clusters import ClusterClients, close_cluster, open_cluster
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.origin_gate import Gates, OriginGate
from ferry.worker.partition import PartitionRunner
from ferry.worker.producer import PURGED_REPORTS_S
from ferry.worker.sinks import Sinks

_log = log.get_logger(__name__)
MIN_PREFETCH_BYTES = 64 * 1024
MIN_PREFETCH_RECORDS = 100
MIN_FINAL_WRITE_MS = 1_000
MAX_FINAL_WRITE_MS = 10_000
CLOSE_GRACE_S = 2.0
"""On stop, how long closing the clients may take when Kafka answers (the producer's last
deliveries, the consumers' closes); a close still running after it is left behind."""


def final_write_timeout_ms(drain_timeout_ms: int) -> int:
    """How long a release waits for its final offset writes (and group commits) to be confirmed:
    half the drain timeout, at least 1 s and at most 10 s (5 s with the default drain timeout).
    Past it the worker goes on without the confirmation; the next owner then restores the last
    confirmed state and redelivers what came after it (at-least-once). The cap keeps a whole
    SIGTERM (drain + this + closing the clients) inside the Helm chart's grace period, the drain
    timeout + 20 s."""
    return min(max(drain_timeout_ms // 2, MIN_FINAL_WRITE_MS), MAX_FINAL_WRITE_MS)


def prefetch_bytes_per_partition(per_partition: int, budget: int, owned: int) -> int:
    """Each partition's prefetch bound: the per-partition setting, but at most an even share of the
    worker's budget, so a worker owning a thousand partitions holds no more than one owning ten."""
    return max(MIN_PREFETCH_BYTES, min(per_partition, budget // max(1, owned)))


def prefetch_records_per_partition(per_partition: int, budget: int, owned: int) -> int:
    """Each partition's record bound: an even share of the worker's record budget, at most the
    per-partition setting and never below 100 records (unless the setting itself is lower). A
    worker with few partitions fetches deep, so their fetches stay large; one owning a thousand
    holds no more records than one owning twelve."""
    return min(per_partition, max(MIN_PREFETCH_RECORDS, budget // max(1, owned)))


class Engine:
    def __init__(self, settings: Settings, worker_id: str, *, metrics: WorkerMetrics | None = None) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.metrics = metrics or WorkerMetrics()
        self._runners: dict[PartitionRef, PartitionRunner] = {}
        self._fetch_of: dict[PartitionRef, Fetcher] = {}
        self._routes: dict[tuple[str, TP], PartitionRunner] = {}
        self._clusters: dict[str, ClusterClients] = {}
        """The clients of each Kafka cluster this worker serves (``default`` always)."""
        self._opening: dict[str, asyncio.Future[ClusterClients]] = {}
        self._lent: Counter[str] = Counter()
        """Clusters whose dead-letter sink a partition is using now (see :meth:`_dead_letters_in`)."""
        self._flush_task: asyncio.Task[None] | None = None
        self._expected = 0
        """How many partitions the worker's source means this engine to own (see :meth:`expect`)."""
        self.started = False
        self._sharing: dict[str, int] = {}  # workers pushing to each adaptive origin (assignment)
        self._stopping = False
        self.kafka_unconfirmed = False
        """The latest release's final writes or group commits went unconfirmed: Kafka is not
        answering, so closing does not wait for the producer to flush."""

    async def start(self) -> None:
        default = ClusterClients.create(self.settings.kafka)
        self._clusters[DEFAULT_CLUSTER] = default
        self._producer = default.producer
        self._store = default.store
        wait_s = 1.0
        while True:  # as a pod waits for its dependencies: one line per attempt, never a traceback
            try:
                await asyncio.to_thread(default.store.ensure_topic)
                break
            except KafkaUnavailable as exc:
                _log.warning(
                    "kafka.unreachable",
                    setting="FERRY_KAFKA_BOOTSTRAP",
                    address=self.settings.kafka.bootstrap,
                    error=str(exc)[:200],
                    next_try_s=wait_s,
                    hint="start Kafka or correct FERRY_KAFKA_BOOTSTRAP; this worker waits for it",
                )
                await asyncio.sleep(wait_s)
                wait_s = min(30.0, wait_s * 2)
        self._client = Sinks(self._producer, self.settings)
        self._client.tracing = tracing.from_env(os.environ)
        self._client.export(self.metrics.internal)
        await self._client.start()
        self._lease = Lease()
        self._ctx = Context(
            worker_id=self.worker_id,
            client=self._client,
            dead_letters=default.dead_letters,
            metrics=self.metrics,
            lease=self._lease,
            prefetch_records=prefetch_records_per_partition(
                self.settings.worker.prefetch_records, self.settings.worker.prefetch_budget_records, self._expected
            ),
            prefetch_bytes=prefetch_bytes_per_partition(
                self.settings.worker.prefetch_bytes, self.settings.worker.prefetch_budget_bytes, self._expected
            ),
            gates=Gates(on_new=self._export_gate),
            dead_letters_in=self._dead_letters_in,
            deferrals=(
                Deferrals(self.settings.kafka.client_config(), self._producer, self.settings.kafka.delay_topic)
                if self.settings.coordinator.internal_work
                else None
            ),
        )
        self._ctx.gates.share(self._sharing)
        self._flush_task = asyncio.create_task(self._flush_loop())
        self.started = True
        _log.info("engine.started", worker=self.worker_id)

    # --- ownership -----------------------------------------------------------------------

    async def acquire(
        self, ref: PartitionRef, sub: Subscription, epoch: int | None, *, from_beginning: bool = False
    ) -> None:
        """Take a partition. ``epoch=None`` (static assignments only) adopts the restored epoch.
        ``from_beginning``: with no offset state yet, start at the beginning whatever
        ``start_from`` says (the coordinator met the partition after the subscription started,
        see :mod:`coordinator.starts`)."""
        if ref in self._runners:
            runner = self._runners[ref]
            if epoch is not None:
                runner.epoch = max(runner.epoch, epoch)
            runner.update(sub)
            return
        started = time.monotonic()
        clients = await self._cluster(ref.cluster)
        restored = await clients.store.restore(ref)
        if epoch is None:
            epoch = restored.epoch if restored is not None else 0
        elif restored is not None and restored.epoch > epoch:
            _log.warning("partition.newer_state", key=ref.label(), epoch=epoch, restored_epoch=restored.epoch)
        anchored = restored is None
        if restored is None:
            # First owner ever: make the start durable before the first push (see worker.start_offsets).
            start_from = sub.start_from
            # Every record of the retry topic is a redriven one, written for this subscription only,
            # usually just before the topic's first owner appears: never skip them.
            if from_beginning or ref.topic == sub.retry_topic:
                start_from = "earliest"
            start = await clients.starts.resolve((ref.topic, ref.partition), start_from)
            if start_from != sub.start_from:
                _log.info("partition.starts_at_beginning", key=ref.label(), start_from=sub.start_from, offset=start)
            restored = OffsetState(start, (), epoch, self.worker_id, now_ms())
            await clients.store.write(ref, restored, sub.group_id)
        if ref in self._runners:  # acquired meanwhile by a concurrent call
            return
        fetcher = self._fetcher_for(clients, (ref.topic, ref.partition), ref.subscription.startswith(INTERNAL_PREFIX))
        tp = (ref.topic, ref.partition)

        def set_gate(gate: Gate) -> None:
            # A released runner still draining must not move the fetch of the partition's next owner.
            if self._routes.get((fetcher.name, tp)) is runner:
                fetcher.gate(tp, gate)

        runner = PartitionRunner(ref, sub, epoch, self._ctx, restored, gate=set_gate, dead_letters=clients.dead_letters)
        self._runners[ref] = runner
        self._fetch_of[ref] = fetcher
        self._routes[(fetcher.name, tp)] = runner
        fetcher.assign(tp, restored.committed)
        self._owned_changed()
        self.metrics.handoffs.labels(direction="acquired").inc()
        _log.info(
            "partition.acquired",
            key=ref.label(),
            epoch=epoch,
            committed=restored.committed,
            acked_ranges=len(restored.acked),
            anchored=anchored,
            restore_ms=int((time.monotonic() - started) * 1000),
        )

    def share_origins(self, sharing: dict[str, int]) -> None:
        """How many workers push to each adaptive endpoint origin, this one included (the
        assignment's ``origins``): their limits grow as one (worker.limiter, *sharing*)."""
        self._sharing = dict(sharing)
        if self.started:
            self._ctx.gates.share(self._sharing)

    def expect(self, count: int) -> None:
        """The source's assignment changed: it means this engine to own ``count`` partitions. The
        budgets are shared among these from now on, not only among those taken so far, so that
        partitions taken one by one do not each fill a larger share before the rest arrive."""
        if count != self._expected:
            self._expected = count
            if self.started:  # else start() counts them
                self._owned_changed()

    def _owned_changed(self) -> None:
        w = self.settings.worker
        owned = max(len(self._runners), self._expected)
        ctx = self._ctx
        ctx.prefetch_bytes = prefetch_bytes_per_partition(w.prefetch_bytes, w.prefetch_budget_bytes, owned)
        ctx.prefetch_records = prefetch_records_per_partition(w.prefetch_records, w.prefetch_budget_records, owned)
        # A fetcher's batch must stay below the room between a partition's hold and its bound.
        batch = consume_batch(ctx.prefetch_records, w.fetch_batch_records)
        for clients in self._clusters.values():
            for f in (*clients.fetchers, *clients.internal_fetchers):
                f.batch_size = batch
        self.metrics.owned.set(len(self._runners))

    def _fetcher_for(self, clients: ClusterClients, tp: TP, internal: bool = False) -> Fetcher:
        """A fetcher not yet reading ``tp``. Ferry's own work (the delay store, the back-checks)
        has fetchers of its own that wait longer for data (``ClusterClients.fetch_config``): its
        ~80 partitions are idle most of the time, and an empty fetch of all of them every 10 ms
        kept a broker core busy."""
        pool = clients.internal_fetchers if internal else clients.fetchers
        for f in pool:
            if tp not in f.assigned:
                return f
        where = "" if clients.name == DEFAULT_CLUSTER else f"{clients.name}-"
        name = f"{self.worker_id}-{where}{'internal-' if internal else ''}{len(pool)}"
        batch = consume_batch(self._ctx.prefetch_records, self.settings.worker.fetch_batch_records)
        f = Fetcher(clients.fetch_config(internal=internal), name, self._on_batch, batch_size=batch)
        f.start(asyncio.get_running_loop())
        pool.append(f)
        return f

    async def _cluster(self, name: str) -> ClusterClients:
        """The clients of a Kafka cluster, opened on first use (one opening at a time per cluster)."""
        found = self._clusters.get(name)
        if found is not None:
            return found
        opening = self._opening.get(name)
        if opening is None:
            opening = self._opening[name] = asyncio.ensure_future(open_cluster(self.settings.kafka.for_cluster(name)))
            opening.add_done_callback(lambda _: self._opening.pop(name, None))
        clients = await asyncio.shield(opening)
        self._clusters.setdefault(name, clients)
        return self._clusters[name]

    @contextlib.asynccontextmanager
    async def _dead_letters_in(self, name: str) -> AsyncIterator[DeadLetterSink]:
        """The dead-letter sink of cluster ``name``, for a record of it read from the retry topic
        (in ``default``) by a worker that may own none of its partitions: opened if needed, never
        closed while in use, then closed with the cluster's other clients once a release finds
        the worker owns none of its partitions."""
        clients = await self._cluster(name)
        self._lent[name] += 1
        try:
            yield clients.dead_letters
        finally:
            self._lent[name] -= 1
            if not self._lent[name]:
                del self._lent[name]

    async def _close_unused_clusters(self) -> None:
        """Close the clients of every cluster but ``default`` this worker owns no partition of
        and sends no dead letter to."""
        for name in [n for n in self._clusters if n != DEFAULT_CLUSTER]:
            # Checked per cluster: closing the previous one awaited, a partition or a dead letter may use it now.
            if name in self._lent or any(ref.cluster == name for ref in self._runners):
                continue
            clients = self._clusters.pop(name)
            await close_cluster(clients, 0.0 if self.kafka_unconfirmed else CLOSE_GRACE_S)

    def _on_batch(self, fetcher: Fetcher, batch: Batch) -> None:
        for tp in set(batch.records) | set(batch.eof):
            runner = self._routes.get((fetcher.name, tp))
            if runner is None:
                continue  # released meanwhile
            runner.feed(batch.records.get(tp, []), batch.high_watermarks.get(tp), batch.eof.get(tp))

    async def release(self, ref: PartitionRef, drain_timeout_ms: int | None = None) -> bool:
        """Release one partition (see :meth:`release_many`); False if its final state was not confirmed."""
        return not await self.release_many([ref], drain_timeout_ms)

    async def release_many(self, refs: list[PartitionRef], drain_timeout_ms: int | None = None) -> list[PartitionRef]:
        """Release partitions together: stop fetching them, drain their in-flight pushes in
        parallel (up to the drain timeout), then write their final offset states and commit the
        watermarks, waiting for the broker's confirmation at most :func:`final_write_timeout_ms`.
        Returns the partitions whose final state was not confirmed in time, after naming them in
        one ``offsets.final_state_unconfirmed`` line."""
        runners: list[PartitionRunner] = []
        for ref in refs:
            runner = self._runners.pop(ref, None)
            if runner is None:
                continue
            fetcher = self._fetch_of.pop(ref)
            tp = (ref.topic, ref.partition)
            fetcher.unassign(tp)
            self._routes.pop((fetcher.name, tp), None)
            runners.append(runner)
        if not runners:
            return []
        try:
            return await self._release_runners(runners, drain_timeout_ms)
        finally:
            if not self._stopping:
                await self._close_unused_clusters()

    async def _release_runners(
        self, runners: list[PartitionRunner], drain_timeout_ms: int | None
    ) -> list[PartitionRef]:
        started = time.monotonic()
        drain_ms = self.settings.worker.drain_timeout_ms if drain_timeout_ms is None else drain_timeout_ms
        # Ferry's own work waits on timers, not on endpoints: nothing of it is half-done, so its
        # partitions are handed over at once and the new owner reads them again from the watermark.
        await asyncio.gather(
            *(r.release(0 if r.sub.name.startswith(INTERNAL_PREFIX) else drain_ms / 1000) for r in runners)
        )
        unconfirmed = await self._final_writes(runners)
        self._owned_changed()
        release_ms = int((time.monotonic() - started) * 1000)
        for runner in runners:
            ref = runner.ref
            self.metrics.handoffs.labels(direction="released").inc()
            self._forget_metrics(ref)
            _log.info(
                "partition.released",
                key=ref.label(),
                epoch=runner.epoch,
                committed=runner.merge.committed if runner.merge else None,
                confirmed=ref not in unconfirmed,
                release_ms=release_ms,
            )
        return unconfirmed

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
        for r in runners:
            self._forget_metrics(r.ref)
        self._owned_changed()
        _log.warning("engine.fenced", worker=self.worker_id, partitions=len(runners))

    def _forget_metrics(self, ref: PartitionRef) -> None:
        """A partition this worker no longer owns has no lag or stall here (its owner reports them)."""
        labels = (ref.subscription, ref.topic, str(ref.partition), ref.cluster)
        for gauge in (self.metrics.lag, self.metrics.stalled):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)

    def owned(self) -> dict[PartitionRef, int]:
        return {ref: r.epoch for ref, r in self._runners.items()}

    def stats(self) -> list[dict[str, Any]]:
        return [r.stats() for r in self._runners.values()]

    def _export_gate(self, origin: str, gate: OriginGate) -> None:
        self.metrics.endpoint_limit.labels(origin).set_function(lambda: gate.limit)
        self.metrics.endpoint_baseline.labels(origin).set_function(lambda: gate.limiter.baseline_s or 0.0)

    def endpoint_stats(self) -> dict[str, Any]:
        """Adaptive limits per endpoint origin: limit, in flight, waiting, no-queue latency."""
        return self._ctx.gates.stats() if self.started else {}

    def internal_stats(self) -> dict[str, Any]:
        """The delay store's and the back-check runner's figures on this worker."""
        return self._client.stats() if self.started and isinstance(self._client, Sinks) else {}

    # --- offsets -------------------------------------------------------------------------

    async def _write(self, runner: PartitionRunner) -> None:
        state = runner.state()
        if state is None:
            return
        runner.dirty = False
        try:
            await self._clusters[runner.ref.cluster].store.write(runner.ref, state, runner.sub.group_id)
        except Exception as exc:
            runner.dirty = True
            _log.error("offsets.write_failed", key=runner.ref.label(), error=str(exc))
            return
        self.metrics.commits.labels(subscription=runner.ref.subscription).inc()

    async def _final_writes(self, runners: list[PartitionRunner]) -> list[PartitionRef]:
        """Write each runner's final state, then commit the groups, all within one bound; the
        partitions whose write the broker did not confirm within it (or refused)."""
        timeout_ms = final_write_timeout_ms(self.settings.worker.drain_timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        writes: dict[asyncio.Future[None], PartitionRunner] = {}
        for runner in runners:
            state = runner.state()
            if state is None:
                continue  # nothing fetched, nothing restored: no state to keep
            runner.dirty = False
            store = self._clusters[runner.ref.cluster].store
            writes[asyncio.ensure_future(store.write(runner.ref, state, runner.sub.group_id))] = runner
        unconfirmed: list[PartitionRef] = []
        errors: dict[str, str] = {}
        if writes:
            done, _ = await asyncio.wait(writes, timeout=timeout_ms / 1000)
            for fut, runner in writes.items():
                if fut in done and fut.exception() is None:
                    self.metrics.commits.labels(subscription=runner.ref.subscription).inc()
                    continue
                unconfirmed.append(runner.ref)
                if fut in done:
                    errors[runner.ref.label()] = str(fut.exception())
                else:
                    # Still queued in the producer: it may yet land (a lower epoch than the next
                    # owner's, so harmless), or be purged when the worker stops. Either way it
                    # is not reported as confirmed.
                    fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        if unconfirmed:
            _log.warning(
                "offsets.final_state_unconfirmed",
                partitions=[ref.label() for ref in unconfirmed],
                timeout_ms=timeout_ms,
                errors=errors,
                outcome="the next owner restores the last confirmed state and redelivers from it"
                " (at-least-once: nothing acknowledged is lost, some records may come twice)",
            )
        stores = {self._clusters[r.ref.cluster].store for r in runners if r.ref.cluster in self._clusters}
        commits = await asyncio.gather(
            *(s.commit_groups(timeout_s=max(0.0, deadline - time.monotonic())) for s in stores)
        )
        committed = all(commits)
        if not committed:
            _log.warning("offsets.group_commit_unconfirmed", timeout_ms=timeout_ms)
        self.kafka_unconfirmed = bool(unconfirmed) or not committed
        return unconfirmed

    async def _flush_loop(self) -> None:
        interval_s = self.settings.worker.offset_flush_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            dirty = [r for r in self._runners.values() if r.dirty]
            await asyncio.gather(*(self._write(r) for r in dirty))
            await asyncio.gather(*(c.store.commit_groups() for c in list(self._clusters.values())))
            in_flight: dict[str, int] = {}
            now = time.monotonic()
            for r in self._runners.values():
                labels = (r.ref.subscription, r.ref.topic, str(r.ref.partition), r.ref.cluster)
                self.metrics.stalled.labels(*labels).set(r.observe_stall(now))
                s = r.stats()
                in_flight[r.ref.subscription] = in_flight.get(r.ref.subscription, 0) + s["in_flight"]
                if s["lag"] is not None:
                    self.metrics.lag.labels(*labels).set(s["lag"])
            for name, n in in_flight.items():
                self.metrics.in_flight.labels(name).set(n)

    async def stop(self, drain_timeout_ms: int | None = None) -> None:
        """Release everything gracefully (drains in parallel), then close the clients.

        Bounded even when Kafka is unreachable: the releases wait for their final writes at
        most :func:`final_write_timeout_ms`; then, if anything went unconfirmed, the producer
        purges what it still holds at once instead of flushing, and every client gets
        :data:`CLOSE_GRACE_S` to close before it is left behind."""
        self._stopping = True
        await self.release_many(list(self._runners), drain_timeout_ms)
        if self._flush_task is not None:
            self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        await self._client.close()
        flush_s = 0.0 if self.kafka_unconfirmed else CLOSE_GRACE_S
        closers: dict[str, Callable[[], object]] = {}
        for clients in self._clusters.values():
            closers.update(clients.closers(flush_s, CLOSE_GRACE_S))
        left = await close_within(closers, CLOSE_GRACE_S + PURGED_REPORTS_S)
        if left:
            _log.warning("engine.clients_left_open", worker=self.worker_id, clients=left)
        _log.info("engine.stopped", worker=self.worker_id)
