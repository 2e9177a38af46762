"""The worker's take of a partition, cancelled half-way (the leader assigned the partition elsewhere a
moment later): the owner node its ZooKeeper transaction may still create must be given back, or
nobody else can take the partition while this worker lives (found by the chaos suite: a partition
stalled for good after two quick rebalances)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ferry import config, zkpaths
from ferry.subscription import PartitionRef, parse
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.zk_source import ZkSource
from tests.support.wait import until_async

pytestmark = pytest.mark.integration


class NoEngine:
    """Only what ZkSource calls; a partition taken here is never pushed."""

    def __init__(self) -> None:
        self.metrics = WorkerMetrics(CollectorRegistry())
        self.acquired: list[PartitionRef] = []

    async def acquire(self, ref: PartitionRef, sub: Any, epoch: int, from_beginning: bool = False) -> None:
        self.acquired.append(ref)

    def owned(self) -> dict[PartitionRef, int]:
        return {}

    async def release_many(self, refs: list[PartitionRef]) -> list[PartitionRef]:
        return []

    async def fence(self) -> None:
        return None

    def set_lease(self, deadline: float | None) -> None:
        return None

    def share_origins(self, sharing: dict[str, int]) -> None:
        return None

    def stats(self) -> list[dict[str, Any]]:
        return []


@contextlib.asynccontextmanager
async def started(engine: Any, zk_connect: str, cluster_name: str) -> AsyncIterator[ZkSource]:
    """A worker's ZooKeeper source over ``engine``, connected; stopped and closed on the way out."""
    settings = config.load(env={"FERRY_ZK_CONNECT": zk_connect, "FERRY_CLUSTER": cluster_name})
    source = ZkSource(engine, settings, "w1")
    source.loop = asyncio.get_running_loop()
    await asyncio.to_thread(source.zk.start, 15)
    try:
        yield source
    finally:
        await asyncio.to_thread(source.zk.stop)
        await asyncio.to_thread(source.zk.close)


async def test_cancelled_take_gives_the_owner_node_back(zk_connect: str, cluster_name: str) -> None:
    engine = NoEngine()
    async with started(engine, zk_connect, cluster_name) as source:
        ref = PartitionRef("s", "t", 0)
        in_thread = threading.Event()
        real_try_take = source._try_take

        def slow_try_take(r: PartitionRef) -> int | None:
            in_thread.set()
            time.sleep(0.5)  # the cancel lands while the transaction is still to come
            return real_try_take(r)

        source._try_take = slow_try_take  # type: ignore[method-assign]
        source.desired = {ref: parse({"name": "s", "topics": ["t"], "endpoint": {"url": "http://127.0.0.1:9/"}})}
        source._reconcile()
        await asyncio.to_thread(in_thread.wait, 5)
        source.desired = {}  # assigned elsewhere
        source._reconcile()  # cancels the take
        await asyncio.sleep(1.5)

        owner = zkpaths.owner(cluster_name, *ref)
        stat = await asyncio.to_thread(source.zk.exists, owner)
        holder = json.loads((await asyncio.to_thread(source.zk.get, owner))[0]) if stat else None
        assert stat is None, f"the cancelled take left the owner node behind: {holder}"
        assert engine.acquired == [] and ref not in source.owned


async def test_take_cancelled_inside_the_engine_gives_the_owner_node_back(zk_connect: str, cluster_name: str) -> None:
    """The engine's acquire is interrupted by a cancellation while the partition is still wanted:
    the owner node is given back and the partition is taken again, never left owned by nobody."""

    class CancelledOnce(NoEngine):
        async def acquire(self, ref: PartitionRef, sub: Any, epoch: int, from_beginning: bool = False) -> None:
            self.acquired.append(ref)
            if len(self.acquired) == 1:
                raise asyncio.CancelledError  # e.g. a restore future cancelled under it

    engine = CancelledOnce()
    async with started(engine, zk_connect, cluster_name) as source:
        try:
            ref = PartitionRef("s", "t", 0)
            source.desired = {ref: parse({"name": "s", "topics": ["t"], "endpoint": {"url": "http://127.0.0.1:9/"}})}
            source._reconcile()
            async with asyncio.timeout(10):
                while ref not in source.owned or len(engine.acquired) < 2:
                    await asyncio.wait_for(source._wake.wait(), 5)
                    source._wake.clear()
                    source._reconcile()
                    await asyncio.sleep(0.05)
            assert engine.acquired == [ref, ref] and ref in source.owned
        finally:
            for t in list(source.taking.values()):
                t.cancel()


async def test_two_give_backs_at_once_never_delete_another_workers_node(zk_connect: str, cluster_name: str) -> None:
    """A cancelled take and a release both give P back. Had both read our owner node before the
    first deleted it, the second's delete by version (a new node has version 0 again) would remove
    the node another worker created in between, while that worker serves P."""
    from kazoo.client import KazooClient

    async with started(NoEngine(), zk_connect, cluster_name) as source:
        other = KazooClient(hosts=zk_connect)
        await asyncio.to_thread(other.start, 15)
        ref = PartitionRef("s", "t", 0)
        owner = zkpaths.owner(cluster_name, *ref)
        try:
            assert await asyncio.to_thread(source._try_take, ref) == 1
            both_read, gets, deletes = threading.Event(), [0], [0]
            real_get, real_delete = source.zk.get_async, source.zk.delete_async

            def get_async(path: str, *args: Any, **kwargs: Any) -> Any:
                gets[0] += 1
                if gets[0] == 2:
                    both_read.set()
                return real_get(path, *args, **kwargs)

            def delete_async(path: str, version: int = -1) -> Any:
                deletes[0] += 1
                if deletes[0] == 1:
                    both_read.wait(1.0)  # let a concurrent give-back read our node too, if there is one
                done = real_delete(path, version=version)
                done.get(5)
                if deletes[0] == 1:  # another worker takes P at once
                    other.create(owner, json.dumps({"worker": "w2", "epoch": 2}).encode(), ephemeral=True)
                return done

            source.zk.get_async = get_async  # type: ignore[method-assign]
            source.zk.delete_async = delete_async  # type: ignore[method-assign]
            await asyncio.gather(source._give_back(ref), source._give_back(ref))
            stat = await asyncio.to_thread(other.exists, owner)
            assert stat is not None and stat.ephemeralOwner == other.client_id[0], "w2's owner node was deleted"
        finally:
            await asyncio.to_thread(other.stop)
            await asyncio.to_thread(other.close)


async def test_a_subscription_changed_during_the_take_reaches_the_new_runner(
    zk_connect: str, cluster_name: str
) -> None:
    """The leader's next assignment changes the subscription (a new endpoint URL) while the engine is
    still restoring the partition: the engine's update reaches only the runners it has, so the
    take must hand the newer subscription on, or the partition pushes to the old URL until the
    next change (found by `ferry dev`'s second run, which repoints its demo subscription)."""
    restoring = asyncio.Event()
    restored = asyncio.Event()

    class Runners(NoEngine):
        """As the engine does: update_subscription updates the runners there are."""

        def __init__(self) -> None:
            super().__init__()
            self.runners: dict[PartitionRef, Any] = {}

        def expect(self, partitions: int) -> None:
            return None

        async def acquire(self, ref: PartitionRef, sub: Any, epoch: int, from_beginning: bool = False) -> None:
            restoring.set()
            await restored.wait()
            self.runners[ref] = sub

        async def update_subscription(self, sub: Any) -> None:
            for ref in self.runners:
                if ref.subscription == sub.name:
                    self.runners[ref] = sub

    def assignment(url: str) -> bytes:
        doc = {"name": "s", "topics": ["t"], "endpoint": {"url": url}}
        entry = {"subscription": "s", "topic": "t", "partition": 0}
        return json.dumps(
            {"subscriptions": {"s": parse(doc).to_doc(mask_secrets=False)}, "partitions": [entry]}
        ).encode()

    engine = Runners()
    async with started(engine, zk_connect, cluster_name) as source:
        ref = PartitionRef("s", "t", 0)
        source._assignment_changed(assignment("http://127.0.0.1:9/old"))
        source._reconcile()
        await asyncio.wait_for(restoring.wait(), 10)
        source._assignment_changed(assignment("http://127.0.0.1:9/new"))  # while restoring
        await asyncio.sleep(0)  # the update the assignment spawned runs, finding no runner yet
        restored.set()
        await until_async(lambda: ref in engine.runners, 10, "the partition taken")
        await until_async(
            lambda: engine.runners[ref].endpoint.url == "http://127.0.0.1:9/new", 5, "the new URL on the runner"
        )
