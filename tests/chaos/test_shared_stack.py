"""Fault scenarios on one shared stack (the session's ZooKeeper and broker, a MariaDB database of its
own, 2 coordinators, 3 workers). Each scenario has its own topic and subscription under a steady
keyed load, injects its faults, heals them, and leaves the stack whole for the next one; the
verdict (tests/chaos/verdict.py) is asserted when its ``with stack.scenario(...)`` block ends.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from ferry.devstack import embedded
from tests.chaos.conftest import fresh_database
from tests.chaos.harness import SESSION_S, ChaosStack, Scenario
from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.wait import until

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

# More rounds for a longer hunt outside CI: FERRY_CHAOS_ROUNDS=20 python3 -m pytest tests/chaos -k kill_9_random
ROUNDS = int(os.environ.get("FERRY_CHAOS_ROUNDS", "4"))


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, zookeeper: embedded.ZooKeeperProcess, kafka_bootstrap: str
) -> Iterator[ChaosStack]:
    with fresh_database() as db_url, EndpointRecorder() as ep:
        st = ChaosStack(tmp_path_factory.mktemp("chaos"), zookeeper.port, kafka_bootstrap, db_url, ep)
        try:
            yield st.start()
        finally:
            st.close()


def _moved_away(sc: Scenario, worker: str, partitions: frozenset[int]) -> bool:
    owners = sc.watch.owners()
    return all(owners.get(p) not in (None, worker) for p in partitions)


def _log_has(path: Path, text: str, after: int) -> bool:
    return text in path.read_text(errors="replace")[after:]


def test_kill_9_random_workers(stack: ChaosStack) -> None:
    rng = random.Random(7)
    with stack.scenario("kill-9-workers") as sc:
        for _ in range(ROUNDS):
            victim = rng.choice(sorted(stack.workers))
            with sc.fault(f"kill-9 {victim}", partitions=sc.owned_by(victim)):
                stack.workers[victim].kill(signal.SIGKILL)
                time.sleep(1.0)
                stack.start_worker(victim).wait_ready(60)
                until(lambda v=victim: v in stack.registered(), timeout_s=30, what=f"{victim} registered again")


def test_kill_9_leader_coordinator(stack: ChaosStack) -> None:
    with stack.scenario("kill-9-leader") as sc:
        leader = stack.leader_name()
        assert leader is not None
        # A leader change moves nothing by design: no duplicate may come from it.
        with sc.fault(f"kill-9 {leader}", partitions=frozenset()):
            old_pid = stack.cluster.leader()
            stack.coordinators.pop(leader).kill(signal.SIGKILL)
            until(lambda: stack.cluster.leader() not in (None, old_pid), timeout_s=30, what="the standby leads")
            # The new leader still rebalances: a worker joins, then leaves gracefully.
            joiner = stack.start_worker("w4").wait_ready(60)
            until(lambda: "w4" in sc.owners_now(), timeout_s=60, what="w4 given partitions by the new leader")
            sc.wait_flowing(time.time())
            joiner.stop(grace_s=30)
            stack.workers.pop("w4")
            until(lambda: "w4" not in sc.owners_now(), timeout_s=60, what="w4's partitions moved back")
            stack.start_coordinator(f"{leader}b").wait_ready(60)


def test_frozen_leader_steps_down_and_stands_by(stack: ChaosStack) -> None:
    """kill -STOP the leader beyond its session: the standby leads and rebalances; the old leader,
    woken, steps down (its session is gone, so it can write nothing) and campaigns again as a standby."""
    with stack.scenario("sigstop-leader") as sc:
        leader = stack.leader_name()
        assert leader is not None
        proc = stack.coordinators[leader]
        mark = len(proc.log_path.read_text(errors="replace"))
        with sc.fault(f"sigstop {leader}", partitions=frozenset()):  # moves nothing: no duplicate
            old_pid = stack.cluster.leader()
            proc.kill(signal.SIGSTOP)
            try:
                until(lambda: stack.cluster.leader() not in (None, old_pid), timeout_s=30, what="the standby leads")
            finally:
                proc.kill(signal.SIGCONT)
            until(
                lambda: _log_has(proc.log_path, "leader.stepped_down", mark), timeout_s=30, what="old leader steps down"
            )
            until(lambda: len(stack.contenders()) == 2, timeout_s=30, what="the old leader campaigns again")
            joiner = stack.start_worker("w4").wait_ready(60)
            until(lambda: "w4" in sc.owners_now(), timeout_s=60, what="w4 given partitions by the new leader")
            joiner.stop(grace_s=30)
            stack.workers.pop("w4")
            until(lambda: "w4" not in sc.owners_now(), timeout_s=60, what="w4's partitions moved back")


def test_zookeeper_session_expiry_of_a_worker(stack: ChaosStack) -> None:
    """Cut one running worker off ZooKeeper beyond its session: its lease stops its pushes, the session
    expires, its partitions move; after the cut heals it is fenced and never pushes them again (the
    verdict's fencing check: every request's pusher must own its partition at that moment)."""
    with stack.scenario("zk-session-expiry") as sc:
        victim = sorted(stack.workers)[1]
        moved = sc.owned_by(victim)
        assert moved, f"{victim} owns nothing to move"
        assert sc.pushed_by(victim, moved), f"the endpoint cannot tell {victim}'s pushes: the fencing check is blind"
        log = stack.workers[victim].log_path
        mark = len(log.read_text(errors="replace"))
        with sc.fault(f"zk-cut {victim}", partitions=moved):
            stack.splits[victim].cut()
            until(lambda: _moved_away(sc, victim, moved), timeout_s=SESSION_S * 6, what="partitions moved")
            sc.wait_flowing(time.time())
            stack.splits[victim].heal()
            until(lambda: _log_has(log, "engine.fenced", mark), timeout_s=30, what=f"{victim} fenced")
            until(lambda: victim in stack.registered(), timeout_s=30, what=f"{victim} registered again")


def test_sigstop_worker_beyond_its_session(stack: ChaosStack) -> None:
    with stack.scenario("sigstop-worker") as sc:
        victim = sorted(stack.workers)[0]
        moved = sc.owned_by(victim)
        assert moved, f"{victim} owns nothing to move"
        assert sc.pushed_by(victim, moved), f"the endpoint cannot tell {victim}'s pushes: the fencing check is blind"
        log = stack.workers[victim].log_path
        mark = len(log.read_text(errors="replace"))
        with sc.fault(f"sigstop {victim}", partitions=moved):
            stack.workers[victim].kill(signal.SIGSTOP)
            try:
                until(lambda: _moved_away(sc, victim, moved), timeout_s=SESSION_S * 6, what="partitions moved")
                sc.wait_flowing(time.time())
            finally:
                stack.workers[victim].kill(signal.SIGCONT)
            until(lambda: _log_has(log, "engine.fenced", mark), timeout_s=30, what=f"{victim} fenced")
            until(lambda: victim in stack.registered(), timeout_s=30, what=f"{victim} registered again")


def test_brief_outages_move_nothing(stack: ChaosStack) -> None:
    """A freeze and a ZooKeeper cut shorter than the session (but about as long as the lease): pushes
    pause, the session survives, nothing moves and nothing is pushed twice."""
    with stack.scenario("brief-outages") as sc:
        before = sc.watch.owners()
        frozen, cut = sorted(stack.workers)[:2]
        with sc.fault(f"sigstop-2s {frozen}", partitions=frozenset()):
            stack.workers[frozen].kill(signal.SIGSTOP)
            time.sleep(2.0)  # the fault's length, below the 4 s session
            stack.workers[frozen].kill(signal.SIGCONT)
        with sc.fault(f"zk-cut-2s {cut}", partitions=frozenset()):
            stack.splits[cut].cut()
            time.sleep(2.0)
            stack.splits[cut].heal()
        assert sc.watch.owners() == before, "a fault shorter than the session moved partitions"
        assert sc.watch.timeline() == [o for o in sc.watch.timeline() if o.end is None], "ownership changed"


def _phases(sc: Scenario, ep: EndpointRecorder) -> None:
    """5xx storm, connection resets, timeouts (no answer within the endpoint timeout), slow answers (10 s)."""
    phases = [
        ("5xx-storm", Reply(503)),
        ("resets", Reply(close=True)),
        ("timeouts", Reply(200, delay_s=15)),  # the subscription's endpoint timeout is 12 s
        ("slow-10s", Reply(200, delay_s=10)),
    ]
    for kind, reply in phases:
        with sc.fault(kind):
            hit = [0]

            def script(r: Received, reply: Reply = reply, hit: list[int] = hit) -> Reply:
                hit[0] += 1
                return reply

            ep.script = script
            started = time.monotonic()
            until(lambda h=hit: h[0] >= sc.keys, timeout_s=60, what=f"{kind}: every key hit")
            until(lambda s=started: time.monotonic() - s > 2.0, timeout_s=5)
            ep.script = lambda r: Reply(200)


def test_endpoint_failures(stack: ChaosStack) -> None:
    sub = {
        "endpoint": {"url": stack.endpoint.url, "timeout_ms": 12_000},
        "retry": {"max_attempts": 1000, "initial_backoff_ms": 100, "max_backoff_ms": 1000},
    }
    with stack.scenario("endpoint-failures", rate=200, subscription=sub) as sc:
        _phases(sc, stack.endpoint)


def test_pause_and_resume_under_load(stack: ChaosStack) -> None:
    with stack.scenario("pause-resume") as sc:
        with sc.fault("pause", partitions=frozenset()):  # a pause hands over gracefully: no duplicate
            stack.cluster.set_state(sc.sub, "paused")
            until(lambda: not sc.watch.owners(), timeout_s=30, what="paused: partitions released")
            paused_at = time.time()
            time.sleep(2.0)  # load keeps coming while paused
            resumed_at = time.time()
            stack.cluster.set_state(sc.sub, "active")
        pushed_while_paused = [d for d in sc.log() if paused_at + 0.5 < d.at < resumed_at]
        assert not pushed_while_paused, f"{len(pushed_while_paused)} pushes while paused"


def test_topic_gains_partitions_under_load(stack: ChaosStack, kafka_bootstrap: str) -> None:
    sc = stack.scenario("partitions-added", partitions=4, subscription={"start_from": "earliest"})
    with sc:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        with sc.fault("create-partitions", partitions=frozenset()):
            try:
                for fut in admin.create_partitions([NewPartitions(sc.topic, 8)]).values():
                    fut.result(15)
            except KafkaException as exc:
                if "not supported by broker" in str(exc):
                    pytest.skip(f"the test broker cannot add partitions: {exc}")
                raise
            sc.load.partitions = 8  # the producer spreads the keys over the new partitions too
            sc.partitions = 8
            sc.watch.add(stack.cluster, sc.sub, sc.topic, range(4, 8))
