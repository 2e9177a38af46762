"""ZooKeeper source: the worker side of coordination and of the fenced handoff.

Use case: ``ferry worker`` without ``--assignment``. The worker registers an ephemeral
``workers/<id>``, watches ``assignments/<id>`` (written by the leader) and makes its engine own
exactly the partitions listed there.

Handoff of a partition P, from this worker's point of view:

- *taking* P: wait until ``partitions/../P/owner`` does not exist (the previous owner released P,
  or its session died), then in one ZooKeeper transaction bump ``epoch`` with compare-and-set and
  create the ephemeral ``owner``; then ``engine.acquire(P, epoch)`` restores its offset state.
  Two workers can never both win the transaction, and offset state written by a lower epoch is
  ignored on restore.
- *releasing* P: ``engine.release_many([P])`` (stop fetching, drain in-flight up to the drain
  timeout, flush offset state, bounded even when Kafka is unreachable), then delete ``owner``,
  which wakes the next owner's watch at once. On shutdown every owned partition is released in
  one ``release_many``.

Session states:

- CONNECTED: a heartbeat renews the engine's lease (``set_lease``) every session_timeout/4, with
  a deadline of heartbeat start + 0.8 × session timeout: the server cannot have expired the
  session before then. A frozen process (``kill -STOP``) finds its lease expired on waking and
  starts no push until ZooKeeper has answered again.
- SUSPENDED (connection lost, session maybe alive): nothing is dropped; the lease simply stops
  being renewed.
- LOST (session expired): ``engine.fence()`` at once — the ephemeral owners are gone and others
  may own the partitions now; then register again with the new session and take afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ferry import log, zkpaths
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.subscription import PartitionRef, Subscription, from_trusted
from ferry.worker.blocking import in_daemon_thread
from ferry.worker.engine import Engine
from ferry.zk import close_within, make_client
from ferry.zk import start as zk_start

_log = log.get_logger(__name__)
STATS_INTERVAL_S = 1.0
ZK_CALL_TIMEOUT_S = 5.0
"""The longest a shutdown-time ZooKeeper call may take: while ZooKeeper is unreachable kazoo holds
a call until it reconnects, and a process on its way out must not wait for that."""


class ZkSource:
    def __init__(self, engine: Engine, settings: Settings, worker_id: str, metrics_url: str | None = None) -> None:
        self.engine = engine
        self.settings = settings
        self.worker_id = worker_id
        self.cluster = settings.cluster
        self.metrics_url = metrics_url
        self.zk = make_client(settings)
        self.session_s = settings.zookeeper.session_timeout_ms / 1000
        self.desired: dict[PartitionRef, Subscription] = {}
        # Desired partitions whose first owner starts at their beginning whatever start_from says.
        self.from_beginning: set[PartitionRef] = set()
        self.owned: dict[PartitionRef, int] = {}  # acquired, with epoch
        self.taking: dict[PartitionRef, asyncio.Task[None]] = {}
        self._giving_back: dict[PartitionRef, set[asyncio.Future[None]]] = {}
        self.releasing: dict[PartitionRef, asyncio.Task[None]] = {}
        self._subs: dict[str, Subscription] = {}
        self._wake = asyncio.Event()
        self._background: set[asyncio.Task[None]] = set()
        self._lost = False
        self._stopping = False
        self.registered = False

    # --- kazoo thread → event loop -------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _watch_event(self) -> tuple[asyncio.Event, Callable[[Any], None]]:
        """An event set (on the loop) when a one-shot ZooKeeper watch fires (on kazoo's thread)."""
        event = asyncio.Event()

        def fired(_event: Any) -> None:
            self.loop.call_soon_threadsafe(event.set)

        return event, fired

    def _on_state(self, state: str) -> None:
        self.loop.call_soon_threadsafe(self._state_changed, state)

    def _state_changed(self, state: str) -> None:
        _log.info("zk.state", worker=self.worker_id, state=state)
        if state == KazooState.LOST:
            self._lost = True
            self.registered = False
            self._spawn(self._fence())
        self._wake.set()

    def _on_assignment(self, data: bytes | None, _stat: Any) -> None:
        self.loop.call_soon_threadsafe(self._assignment_changed, data)

    def _assignment_changed(self, data: bytes | None) -> None:
        doc = json.loads(data) if data else {}
        subs = {name: from_trusted(d) for name, d in (doc.get("subscriptions") or {}).items()}
        desired = {}
        from_beginning = set()
        for p in doc.get("partitions") or []:
            ref = PartitionRef.from_entry(p)
            if ref.subscription in subs:
                desired[ref] = subs[ref.subscription]
                if p.get("start") == "earliest":  # met after the subscription started (coordinator.starts)
                    from_beginning.add(ref)
        changed = [s for name, s in subs.items() if self._subs.get(name) not in (None, s)]
        self._subs = subs
        self.desired = desired
        self.from_beginning = from_beginning
        self.engine.expect(len(desired))
        self.engine.share_origins(doc.get("origins") or {})
        for sub in changed:
            self._spawn(self.engine.update_subscription(sub))
        self._wake.set()

    # --- lifecycle -----------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        self.loop = asyncio.get_running_loop()
        self.zk.add_listener(self._on_state)
        giving_up = threading.Event()  # stopped while still waiting for ZooKeeper

        async def give_up() -> None:
            await stop.wait()
            giving_up.set()

        watcher = asyncio.create_task(give_up())
        try:
            if not await asyncio.to_thread(zk_start, self.zk, self.settings, giving_up):
                await asyncio.to_thread(close_within, self.zk, ZK_CALL_TIMEOUT_S)
                return
        finally:
            watcher.cancel()
        if not await self._register_unless(stop):
            await asyncio.to_thread(close_within, self.zk, ZK_CALL_TIMEOUT_S)
            return
        self.zk.DataWatch(zkpaths.assignment(self.cluster, self.worker_id), self._on_assignment)
        background = [asyncio.create_task(self._heartbeat()), asyncio.create_task(self._publish_stats())]
        try:
            while not stop.is_set():
                waiter = asyncio.create_task(self._wake.wait())
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                self._wake.clear()
                if stop.is_set():
                    break
                if self._lost and self.zk.state == KazooState.CONNECTED:
                    self._lost = False
                    if not await self._register_unless(stop):
                        break
                self._reconcile()
        finally:
            self._stopping = True
            for t in background:
                t.cancel()
            await self._shutdown()

    async def _register_unless(self, stop: asyncio.Event) -> bool:
        """:meth:`_register`, or False if ``stop`` is set first: registering waits while another
        live process holds this worker id, and a stop must end that wait."""
        registering = asyncio.create_task(self._register())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({registering, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not registering.done():
            registering.cancel()
            await asyncio.gather(registering, return_exceptions=True)
            return False
        registering.result()
        return True

    async def _register(self) -> None:
        path = zkpaths.worker(self.cluster, self.worker_id)
        doc = {
            "id": self.worker_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": now_ms(),
            "capacity": 1.0,
            "metrics_url": self.metrics_url,
            "zone": self.settings.worker.zone,
        }
        while True:
            try:
                await asyncio.to_thread(self.zk.create, path, json.dumps(doc).encode(), ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                # A previous process with this id: its session has not expired yet. Wait for it.
                gone, fired = self._watch_event()
                stat = await asyncio.to_thread(self.zk.exists, path, watch=fired)
                if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
                    break
                if stat is not None:
                    _log.warning("worker.id_in_use", worker=self.worker_id, wait_s=self.session_s)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(gone.wait(), self.session_s * 2)
        self.registered = True
        _log.info("worker.registered", worker=self.worker_id, zone=self.settings.worker.zone)

    def _reconcile(self) -> None:
        if self._lost or self._stopping:
            return
        for ref in list(self.desired):
            if ref not in self.owned and ref not in self.taking and ref not in self.releasing:
                self.taking[ref] = asyncio.create_task(self._take(ref))
        for ref in list(self.taking):
            if ref not in self.desired:
                self.taking.pop(ref).cancel()
        for ref in list(self.owned):
            if ref not in self.desired and ref not in self.releasing:
                self.releasing[ref] = asyncio.create_task(self._release([ref]))

    # --- take and release ----------------------------------------------------------------

    async def _take(self, ref: PartitionRef) -> None:
        owner = zkpaths.owner(self.cluster, *ref)
        seen = time.monotonic()
        try:
            while ref in self.desired and not self._lost:
                await self._given_back(ref)
                epoch = await self._try_take_or_give_back(ref)
                if epoch is not None:
                    self.owned[ref] = epoch
                    sub = self.desired[ref]
                    try:
                        await self.engine.acquire(ref, sub, epoch, from_beginning=ref in self.from_beginning)
                    except asyncio.CancelledError:
                        if ref not in self.engine.owned():
                            # Given up before the engine took it: the owner node must not outlive
                            # the take, or nobody (this worker included) would ever deliver P.
                            self.owned.pop(ref, None)
                            with contextlib.suppress(Exception):
                                await self._give_back(ref)
                            self.loop.call_later(1.0, self._wake.set)  # take it again if still wanted
                        raise
                    except Exception as exc:
                        # Could not restore (Kafka down?): give the partition back and try again later.
                        _log.error("handoff.acquire_failed", key=ref.key(), error=str(exc))
                        self.owned.pop(ref, None)
                        await self._give_back(ref)
                        self.loop.call_later(1.0, self._wake.set)
                        return
                    latest = self.desired.get(ref)
                    if latest is not None and latest != sub:
                        # The subscription changed while the partition was being restored: the
                        # engine's update reached the runners it had, and this one was not yet.
                        await self.engine.update_subscription(latest)
                    took_s = time.monotonic() - seen
                    self.engine.metrics.handoff_seconds.labels("acquire").observe(took_s)
                    _log.info("handoff.taken", key=ref.key(), epoch=epoch, wait_ms=int(took_s * 1000))
                    return
                gone, fired = self._watch_event()
                stat = await asyncio.to_thread(self.zk.exists, owner, watch=fired)
                if stat is not None:
                    # Bounded: the watch fires on deletion; the timeout only guards a lost watch.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(gone.wait(), self.session_s)
        except KazooException as exc:
            _log.warning("handoff.take_failed", key=ref.key(), error=repr(exc))
            self.loop.call_later(0.5, self._wake.set)
        finally:
            self.taking.pop(ref, None)

    async def _try_take_or_give_back(self, ref: PartitionRef) -> int | None:
        """``_try_take`` in a thread. If this task is cancelled meanwhile (the partition was assigned
        elsewhere, or the session was lost), the thread still runs to the end and may create the
        owner node: delete it then, or it would stay for the whole session and nobody could take the
        partition (it would stall until this worker restarts)."""
        attempt = asyncio.ensure_future(asyncio.to_thread(self._try_take, ref))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                if await attempt is not None:
                    await self._give_back(ref)
                    _log.info("handoff.given_back", key=ref.key(), reason="take cancelled")
            raise

    def _try_take(self, ref: PartitionRef) -> int | None:
        """Blocking. Bump the epoch and create the owner atomically; None if someone owns it."""
        epoch_path = zkpaths.epoch(self.cluster, *ref)
        owner_path = zkpaths.owner(self.cluster, *ref)
        try:
            data, stat = self.zk.get(owner_path)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return int(json.loads(data)["epoch"])  # already ours in this session
            return None
        except NoNodeError:
            pass
        try:
            raw, stat = self.zk.get(epoch_path)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.zk.create(epoch_path, b"0", makepath=True)
            raw, stat = self.zk.get(epoch_path)
        epoch = int(raw or b"0") + 1
        owner = {"worker": self.worker_id, "epoch": epoch, "since": now_ms()}
        tx = self.zk.transaction()
        tx.set_data(epoch_path, str(epoch).encode(), version=stat.version)
        tx.create(owner_path, json.dumps(owner).encode(), ephemeral=True)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            return None
        return epoch

    async def _release(self, refs: list[PartitionRef]) -> None:
        """Release partitions together (one at a time on a reassignment, all of them on shutdown):
        the engine drains them and writes their final states (bounded), then each owner node goes."""
        started = time.monotonic()
        try:
            await self.engine.release_many(refs)
            gave_back = await asyncio.gather(*(self._give_back(ref) for ref in refs), return_exceptions=True)
            took_s = time.monotonic() - started
            for ref, outcome in zip(refs, gave_back, strict=True):
                epoch = self.owned.pop(ref, None)
                if isinstance(outcome, Exception):
                    _log.warning("handoff.release_failed", key=ref.key(), error=repr(outcome))
                    continue
                self.engine.metrics.handoff_seconds.labels("release").observe(took_s)
                _log.info("handoff.released", key=ref.key(), epoch=epoch, release_ms=int(took_s * 1000))
        finally:
            for ref in refs:
                self.releasing.pop(ref, None)
            self._wake.set()

    async def _give_back(self, ref: PartitionRef) -> None:
        """Delete our owner node of P, even if the task asking is cancelled meanwhile: a cancelled
        ``to_thread`` whose job had not started yet (the executor busy with Kafka reads) would
        never delete it, and an owner node nobody serves stalls P until this worker's session ends.
        The next take of P waits for every give-back under way (:meth:`_given_back`): a late one
        would otherwise delete the node that take found (ours, same session) and is serving.

        Give-backs of one P run one after another (a cancelled take and a release may both ask):
        two at once could both read our node, and after the first deleted it and another worker
        created its own — a new node has version 0 again — the second's delete by version would
        remove that worker's node while it serves P."""
        previous = list(self._giving_back.get(ref, ()))

        async def drop() -> None:
            if previous:
                await asyncio.gather(*previous, return_exceptions=True)
            # A thread of its own, not the shared pool: with ZooKeeper gone, the pool's threads may
            # all be held by calls waiting for it (takes under way), and a give-back must still end.
            await in_daemon_thread(self._drop_owner, ref, name="ferry-zk-give-back")

        job = asyncio.ensure_future(drop())
        pending = self._giving_back.setdefault(ref, set())
        pending.add(job)

        def done(_: asyncio.Future[None]) -> None:
            pending.discard(job)
            if not pending and self._giving_back.get(ref) is pending:
                del self._giving_back[ref]

        job.add_done_callback(done)
        await asyncio.shield(job)

    async def _given_back(self, ref: PartitionRef) -> None:
        """Wait until no give-back of P is under way."""
        while self._giving_back.get(ref):
            await asyncio.gather(*self._giving_back[ref], return_exceptions=True)

    def _drop_owner(self, ref: PartitionRef) -> None:
        """Delete P's owner node if it is ours. Bounded: while ZooKeeper is unreachable kazoo would
        hold the call until it reconnects (never, if it is gone); the node is ephemeral, so it goes
        with the session anyway."""
        path = zkpaths.owner(self.cluster, *ref)
        try:
            _, stat = self.zk.get_async(path).get(timeout=ZK_CALL_TIMEOUT_S)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete_async(path, version=stat.version).get(timeout=ZK_CALL_TIMEOUT_S)
        except NoNodeError:
            pass
        except KazooTimeoutError:
            _log.warning(
                "partition.owner_not_dropped", key=ref.label(), hint="ZooKeeper unreachable: it goes with the session"
            )

    async def _fence(self) -> None:
        for t in list(self.taking.values()):
            t.cancel()
        self.owned.clear()
        await self.engine.fence()

    # --- lease and stats -----------------------------------------------------------------

    async def _heartbeat(self) -> None:
        path = zkpaths.worker(self.cluster, self.worker_id)
        while True:
            started = time.monotonic()
            try:
                if self.registered and self.zk.state == KazooState.CONNECTED:
                    await asyncio.to_thread(self.zk.exists, path)
                    self.engine.set_lease(started + 0.8 * self.session_s)
            except KazooException:
                pass  # no renewal: the lease runs out on its own
            await asyncio.sleep(self.session_s / 4)

    async def _publish_stats(self) -> None:
        path = zkpaths.worker_stats(self.cluster, self.worker_id)
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            if not self.registered:
                continue
            doc = json.dumps(
                {
                    "ts": now_ms(),
                    "partitions": self.engine.stats(),
                    "internal": self.engine.internal_stats(),
                    "endpoints": self.engine.endpoint_stats(),
                }
            ).encode()
            try:
                await asyncio.to_thread(self._put_ephemeral, path, doc)
            except KazooException as exc:
                _log.debug("stats.publish_failed", error=repr(exc))

    def _put_ephemeral(self, path: str, data: bytes) -> None:
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, ephemeral=True, makepath=True)

    async def _shutdown(self) -> None:
        """Deregister first (the leader moves the partitions), then release each gracefully."""
        # Threads of their own here, not the shared pool (see _give_back).
        with contextlib.suppress(KazooException, KazooTimeoutError):
            deregister = self.zk.delete_async(zkpaths.worker(self.cluster, self.worker_id))
            await in_daemon_thread(deregister.get, True, ZK_CALL_TIMEOUT_S, name="ferry-zk-deregister")
        self.desired = {}
        for t in list(self.taking.values()):
            t.cancel()
        refs = [r for r in self.owned if r not in self.releasing]
        if refs:
            # Together: one bound for all their final writes, one line naming those not confirmed.
            task = asyncio.create_task(self._release(refs))
            for ref in refs:
                self.releasing[ref] = task
        await asyncio.gather(*set(self.releasing.values()), return_exceptions=True)
        if not await in_daemon_thread(close_within, self.zk, ZK_CALL_TIMEOUT_S, name="ferry-zk-close"):
            _log.warning("zk.close_timeout", worker=self.worker_id, hint="ZooKeeper unreachable: the session expires")


async def run(
    engine: Engine, settings: Settings, worker_id: str, stop: asyncio.Event, metrics_url: str | None = None
) -> None:
    await ZkSource(engine, settings, worker_id, metrics_url).run(stop)
