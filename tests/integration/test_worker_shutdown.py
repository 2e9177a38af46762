"""A worker's SIGTERM finishes in bounded time even when Kafka is gone: the final offset writes get
their own bound, the unconfirmed ones are named in one log line, and the worker still deregisters
and exits. The broker here is the test's own (it is killed), never the session's shared one."""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from pathlib import Path

import pytest

from ferry import kafka, zkpaths
from ferry.devstack import embedded
from ferry.offsets import OffsetState
from ferry.subscription import PartitionRef
from ferry.worker.blocking import close_within
from ferry.worker.engine import final_write_timeout_ms
from ferry.worker.offset_store import OffsetStore
from ferry.worker.producer import AsyncProducer, ProduceFailed
from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, group_offsets, offset_states, produce
from tests.support.wait import until
from tests.support.worker import WorkerProcess, delivering_worker

pytestmark = pytest.mark.integration
DRAIN_MS = 3000
SLACK_S = 8.0  # closing the clients, ZooKeeper, interpreter exit, on a busy 2-core machine


def kill_broker_then_sigterm(broker: embedded.ServiceProcess, worker: WorkerProcess) -> None:
    broker.kill()
    until(lambda: not embedded.port_open(broker.port), timeout_s=10, what="the broker gone")
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    bound_s = (DRAIN_MS + final_write_timeout_ms(DRAIN_MS)) / 1000 + SLACK_S
    until(lambda: worker.proc.poll() is not None, timeout_s=bound_s, what="the worker to exit after SIGTERM")
    print(f"SIGTERM with the broker gone: {worker.name} exited in {time.monotonic() - sent:.1f} s (bound {bound_s} s)")


def assert_unconfirmed_logged(worker: WorkerProcess, key: str) -> None:
    assert worker.proc is not None and worker.proc.returncode == 0
    log = worker.log_path.read_text()
    unconfirmed = [line for line in log.splitlines() if "offsets.final_state_unconfirmed" in line]
    assert len(unconfirmed) == 1, log[-4000:]
    assert f'"{key}"' in unconfirmed[0] and "redelivers" in unconfirmed[0]
    assert "confirmed=false" in next(line for line in log.splitlines() if "partition.released" in line)
    assert "worker.stopped" in log


def test_sigterm_with_kafka_gone_exits_within_the_bound(
    tmp_path: Path, zk_connect: str, own_broker: embedded.ServiceProcess
) -> None:
    bootstrap = f"127.0.0.1:{own_broker.port}"
    topic = f"gone-{secrets.token_hex(3)}"
    create_topic(bootstrap, topic, 1)
    endpoint = EndpointRecorder()
    endpoint.port = embedded.free_port()
    cluster = Cluster(tmp_path, zk_connect, bootstrap, FERRY_DRAIN_TIMEOUT_MS=str(DRAIN_MS))
    try:
        with endpoint:
            cluster.add_subscription({"name": "gone", "topics": [topic], "endpoint": {"url": endpoint.url}})
            cluster.coordinator(port=embedded.free_port())
            worker = cluster.worker("wg", port=embedded.free_port())
            until(lambda: cluster.owners("gone", topic, 1) == {0: "wg"}, timeout_s=30, what="wg owns the partition")
            produce(bootstrap, topic, ((f"k{i}".encode(), f"v{i}".encode(), 0) for i in range(20)))
            endpoint.wait_for(lambda rs: len({r.ce_id for r in rs}) >= 20, timeout_s=30, what="20 records pushed")
            until(
                lambda: [s.committed for s in offset_states(bootstrap, cluster.offsets_topic).values() if s] == [20],
                timeout_s=30,
                what="the offset state of all 20 records confirmed",
            )

            kill_broker_then_sigterm(own_broker, worker)
        assert_unconfirmed_logged(worker, f"gone/{topic}/0")
        assert not cluster.zk.exists(zkpaths.worker(cluster.name, "wg")), "the worker did not deregister"
        assert not cluster.zk.exists(zkpaths.owner(cluster.name, "gone", topic, 0)), "the owner node outlived it"
    finally:
        cluster.close()


def test_static_worker_sigterm_with_kafka_gone(tmp_path: Path, own_broker: embedded.ServiceProcess) -> None:
    """Without ZooKeeper the engine's own stop releases the partitions: the same bound holds."""
    bootstrap = f"127.0.0.1:{own_broker.port}"
    with delivering_worker(tmp_path, "gone", bootstrap, {"FERRY_DRAIN_TIMEOUT_MS": str(DRAIN_MS)}) as (w, topic, _):
        kill_broker_then_sigterm(own_broker, w)
    assert_unconfirmed_logged(w, f"gone/{topic}/0")


def test_static_worker_sigterm_with_kafka_up_confirms_its_final_state(
    tmp_path: Path, own_broker: embedded.ServiceProcess
) -> None:
    """The clean case is unchanged: the final state and group offset are written and confirmed."""
    bootstrap = f"127.0.0.1:{own_broker.port}"
    # No periodic flush: only the final write can record the 10 records.
    env = {"FERRY_DRAIN_TIMEOUT_MS": str(DRAIN_MS), "FERRY_OFFSET_FLUSH_INTERVAL_MS": "600000"}
    with delivering_worker(tmp_path, "up", bootstrap, env) as (w, topic, offsets_topic):
        until(lambda: w.stats()[0]["committed"] == 10, timeout_s=15, what="all 10 acknowledged")
        assert w.proc is not None
        w.proc.send_signal(signal.SIGTERM)
        until(lambda: w.proc.poll() is not None, timeout_s=DRAIN_MS / 1000 + SLACK_S, what="the worker to exit")
    assert w.proc.returncode == 0
    log = w.log_path.read_text()
    assert "final_state_unconfirmed" not in log and "group_commit_unconfirmed" not in log
    assert "confirmed=true" in next(line for line in log.splitlines() if "partition.released" in line)
    states = offset_states(bootstrap, offsets_topic)
    assert [s.committed for s in states.values() if s] == [10]
    assert group_offsets(bootstrap, "ferry.up", topic, 1) == {0: 10}


async def test_offset_store_and_producer_give_up_on_a_dead_broker(own_broker: embedded.ServiceProcess) -> None:
    """The bounds in the small: a group commit that cannot reach a coordinator, a write the broker
    never confirms, and closing the clients under them, each return within their bound."""
    # The committer left behind lives on in this process until its commit gives up (45 s): keep
    # its connection errors out of the next tests' output.
    cfg = {"bootstrap.servers": f"127.0.0.1:{own_broker.port}", "log_level": 2}
    topic = f"__offsets-{secrets.token_hex(3)}"
    assert kafka.ensure_topic(cfg, topic, 1, {"cleanup.policy": "compact"})
    producer = AsyncProducer(cfg)
    store = OffsetStore(cfg, topic, producer)
    ref = PartitionRef("s", "t", 0)
    await store.write(ref, OffsetState(5, (), 1, "w", 0), "ferry.s")  # confirmed: the broker is up
    assert await store.commit_groups(timeout_s=15)  # the committer now knows its coordinator
    await store.write(ref, OffsetState(6, (), 1, "w", 0), "ferry.s")  # confirmed, its commit still queued

    own_broker.kill()
    until(lambda: not embedded.port_open(own_broker.port), timeout_s=10, what="the broker gone")
    write = asyncio.ensure_future(store.write(ref, OffsetState(7, (), 1, "w", 0), "ferry.s"))
    done, _ = await asyncio.wait({write}, timeout=1.0)
    assert not done, "a write was confirmed by a dead broker"
    started = time.monotonic()
    assert not await store.commit_groups(timeout_s=0.5), "a group commit succeeded against a dead broker"
    assert not await store.commit_groups(timeout_s=0.5)  # waits for the one under way, still bounded
    assert time.monotonic() - started < 3

    started = time.monotonic()
    left = await close_within({"producer": lambda: producer.close(0), "store": store.close}, 2.0)
    assert time.monotonic() - started < 4
    assert "producer" not in left  # purged, so nothing to wait for; the store's committer may be left behind
    with pytest.raises(ProduceFailed):
        await asyncio.wait_for(write, timeout=5)  # purged: reported as failed, never as confirmed
