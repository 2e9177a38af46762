"""Coordination end to end: real ZooKeeper, broker, coordinators, workers and HTTP endpoint."""

from __future__ import annotations

import itertools
import secrets
import signal
import time
from collections import Counter, defaultdict

import pytest

from tests.support.cluster import Cluster
from tests.support.endpoint import EndpointRecorder, Received
from tests.support.kafka import create_topic
from tests.support.load import Trickle
from tests.support.wait import until

pytestmark = pytest.mark.integration
PARTS = 24
STALL_BOUND_S = 2.0
"""Longest pause of a partition's deliveries across a join or a graceful leave. A fenced handoff
pauses a partition for ~0.1 s (bench/handoff.py gives the figures); one left to the ZooKeeper
session timeout would pause it for the session timeout (4 s here). The bound is half of that, so
it tells the two apart also on a loaded 2-core machine running two test files at once."""


def balanced(c: Cluster, workers: list[str]) -> bool:
    a = c.assignment()
    counts = Counter(a.values())
    return len(a) == PARTS and set(counts) == set(workers) and max(counts.values()) - min(counts.values()) <= 1


def max_gaps(received: list[Received], since: float, until_t: float) -> dict[int, float]:
    """Per partition, the longest time without a first delivery inside [since, until_t]."""
    times: dict[int, list[float]] = defaultdict(list)
    seen: set[str] = set()
    for r in received:
        if r.ce_id in seen:
            continue
        seen.add(r.ce_id)
        if since <= r.at <= until_t:
            times[r.partition].append(r.at)
    return {p: max((b - a for a, b in itertools.pairwise(ts)), default=0.0) for p, ts in times.items()}


def check_delivery(endpoint: EndpointRecorder, produced: set[tuple[int, int]]) -> Counter[str]:
    got = endpoint.wait_for(
        lambda rs: {(r.partition, r.offset) for r in rs} >= produced, timeout_s=60, what="every produced record"
    )
    return Counter(r.ce_id for r in got)


def test_balance_join_and_graceful_leave(cluster: Cluster, endpoint: EndpointRecorder) -> None:
    topic = f"co-{secrets.token_hex(3)}"
    create_topic(cluster.bootstrap, topic, PARTS)
    cluster.add_subscription({"name": "co", "topics": [topic], "endpoint": {"url": endpoint.url}})
    cluster.coordinator()
    workers = {n: cluster.worker(n) for n in ("w1", "w2", "w3")}
    until(lambda: balanced(cluster, ["w1", "w2", "w3"]), timeout_s=30, what="3 workers x 8 partitions")
    until(lambda: all(cluster.owners("co", topic, PARTS).values()), timeout_s=30, what="every partition owned")
    load = Trickle(cluster.bootstrap, topic, PARTS, rate=480, keys=PARTS * 4).start()
    try:
        endpoint.wait_for(lambda rs: len({r.partition for r in rs}) == PARTS, timeout_s=30, what="all partitions flow")
        before = cluster.assignment()
        joined_at = time.time()
        workers["w4"] = cluster.worker("w4")
        until(lambda: balanced(cluster, ["w1", "w2", "w3", "w4"]), timeout_s=30, what="rebalanced onto 4 workers")
        after = cluster.assignment()
        moved = [p for p in after if before[p] != after[p]]
        assert 5 <= len(moved) <= 7, f"{len(moved)} partitions moved for one joining worker"
        assert all(after[p] == "w4" for p in moved)
        until(lambda: set(cluster.owners("co", topic, PARTS).values()) == set(workers), timeout_s=30, what="w4 owns")
        until(lambda: time.time() > joined_at + 4, timeout_s=10, what="4 s of load after the join")
        gaps = max_gaps(endpoint.snapshot(), joined_at, time.time())
        moved_parts = {p[2] for p in moved}
        for p, gap in gaps.items():
            if p not in moved_parts:
                assert gap < STALL_BOUND_S, f"partition {p} did not move but paused {gap:.2f} s"
        # Graceful leave: SIGTERM w2; its partitions are handed over with short stalls.
        left_at = time.time()
        workers["w2"].stop(grace_s=20)
        assert workers["w2"].proc is not None and workers["w2"].proc.returncode == 0
        until(lambda: balanced(cluster, ["w1", "w3", "w4"]), timeout_s=30, what="rebalanced onto 3 workers")
        until(lambda: time.time() > left_at + 4, timeout_s=10, what="4 s of load after the leave")
        gaps = max_gaps(endpoint.snapshot(), left_at - 1, time.time())
        stalls = sorted(gaps.values())
        print(f"graceful leave: max per-partition stall {stalls[-1]:.3f} s, median {stalls[len(stalls) // 2]:.3f} s")
        assert stalls[-1] < STALL_BOUND_S, f"stall {stalls[-1]:.2f} s"
        metrics = workers["w4"].metrics()
        assert 'ferry_handoff_duration_seconds_count{direction="acquire"}' in metrics
    finally:
        produced = load.stop()
    counts = check_delivery(endpoint, produced)
    dups = sum(c - 1 for c in counts.values())
    assert dups == 0, f"{dups} duplicates after graceful handoffs"


def test_kill_9_worker_and_leader(cluster: Cluster, endpoint: EndpointRecorder) -> None:
    topic = f"kill-{secrets.token_hex(3)}"
    create_topic(cluster.bootstrap, topic, 6)
    cluster.add_subscription({"name": "kill", "topics": [topic], "endpoint": {"url": endpoint.url}, "max_in_flight": 8})
    cluster.coordinator("coord1")
    cluster.coordinator("coord2")
    w = {n: cluster.worker(n) for n in ("w1", "w2", "w3")}
    until(lambda: len(set(cluster.owners("kill", topic, 6).values()) - {None}) == 3, timeout_s=30, what="3 owners")
    load = Trickle(cluster.bootstrap, topic, 6, rate=200, keys=24).start()
    try:
        endpoint.wait_for(lambda rs: len(rs) > 200, timeout_s=30, what="records flowing")
        victim_parts = [p for p, o in cluster.owners("kill", topic, 6).items() if o == "w1"]
        killed_at = time.time()
        w["w1"].kill()
        until(
            lambda: all(cluster.owners("kill", topic, 6)[p] not in (None, "w1") for p in victim_parts),
            timeout_s=4 + 2 + 5,
            what="w1's partitions owned elsewhere",
        )
        resumed = time.time() - killed_at
        print(f"kill -9: partitions resumed elsewhere after {resumed:.2f} s (session timeout 4 s)")
        assert resumed < 4 + 2 + 1
        # Kill the leader coordinator: the standby takes over, delivery goes on.
        leader_pid = cluster.leader()
        assert leader_pid is not None
        leader_proc = next(p for p in cluster.processes if p.proc is not None and str(p.proc.pid) == leader_pid)
        leader_proc.kill()
        until(lambda: cluster.leader() not in (None, leader_pid), timeout_s=15, what="a new leader")
        n = len(endpoint.snapshot())
        endpoint.wait_for(lambda rs: len(rs) > n + 200, timeout_s=15, what="delivery continues under the new leader")
    finally:
        produced = load.stop()
    counts = check_delivery(endpoint, produced)
    dups = sum(c - 1 for c in counts.values())
    print(f"kill -9 worker + leader: {len(produced)} records, {dups} duplicates")
    assert dups <= 6 * 8 + 200, "duplicates beyond the in-flight windows and one flush interval"


def test_stopped_worker_is_fenced(cluster: Cluster, endpoint: EndpointRecorder) -> None:
    topic = f"fence-{secrets.token_hex(3)}"
    create_topic(cluster.bootstrap, topic, 4)
    cluster.add_subscription({"name": "fence", "topics": [topic], "endpoint": {"url": endpoint.url}})
    cluster.coordinator()
    w1, _w2 = cluster.worker("w1"), cluster.worker("w2")
    until(lambda: set(cluster.owners("fence", topic, 4).values()) == {"w1", "w2"}, timeout_s=30, what="2 owners")
    load = Trickle(cluster.bootstrap, topic, 4, rate=100, keys=16).start()
    try:
        endpoint.wait_for(lambda rs: len(rs) > 50, timeout_s=30, what="records flowing")
        moved = [p for p, o in cluster.owners("fence", topic, 4).items() if o == "w1"]
        w1.kill(signal.SIGSTOP)
        stopped_at = time.time()
        until(
            lambda: all(cluster.owners("fence", topic, 4)[p] == "w2" for p in moved),
            timeout_s=15,
            what="w2 takes w1's partitions after w1's session expires",
        )
        w1.kill(signal.SIGCONT)
        resumed_at = time.time()
        until(
            lambda: len(cluster.assignment()) == 4 and "w1" in set(cluster.assignment().values()),
            timeout_s=30,
            what="w1 rejoins and gets partitions again",
        )
    finally:
        produced = load.stop()
    check_delivery(endpoint, produced)
    # While frozen w1 could not push; after waking it must not push the moved partitions (fencing).
    # Pushes by w1 after it woke, of partitions it no longer owned, would arrive right after resumed_at
    # with offsets w2 already delivered: every record of a moved partition first delivered after
    # stopped_at must not be delivered again after resumed_at.
    rs = endpoint.snapshot()
    first_at: dict[str, float] = {}
    for r in rs:
        first_at.setdefault(r.ce_id, r.at)
    late_dups = [
        r
        for r in rs
        if r.partition in moved and r.at >= resumed_at and first_at[r.ce_id] < r.at and first_at[r.ce_id] > stopped_at
    ]
    assert not late_dups, f"fenced worker pushed {len(late_dups)} records of partitions that moved"


def test_pause_and_edit_reach_workers_quickly(cluster: Cluster, endpoint: EndpointRecorder) -> None:
    topic = f"pz-{secrets.token_hex(3)}"
    create_topic(cluster.bootstrap, topic, 4)
    cluster.add_subscription({"name": "pz", "topics": [topic], "endpoint": {"url": endpoint.url}})
    cluster.coordinator()
    cluster.worker("w1")
    until(lambda: all(cluster.owners("pz", topic, 4).values()), timeout_s=30, what="owned")
    load = Trickle(cluster.bootstrap, topic, 4, rate=100, keys=8).start()
    try:
        endpoint.wait_for(lambda rs: len(rs) > 50, timeout_s=30, what="flowing")
        paused_at = time.monotonic()
        cluster.set_state("pz", "paused")
        until(lambda: not any(cluster.owners("pz", topic, 4).values()), timeout_s=10, what="partitions released")
        print(f"pause reached the worker in {time.monotonic() - paused_at:.2f} s")
        assert time.monotonic() - paused_at < 3
        n = len(endpoint.snapshot())
        until(lambda: time.monotonic() > paused_at + 3, timeout_s=5, what="a while paused")
        assert len(endpoint.snapshot()) == n, "a paused subscription kept pushing"
        # Edit while paused, then resume: the edit is in effect and delivery goes on from the kept offsets.
        cluster.edit("pz", endpoint={"url": endpoint.url, "headers": {"X-Team": "billing"}})
        cluster.set_state("pz", "active")
        endpoint.wait_for(
            lambda rs: any(r.headers.get("x-team") == "billing" for r in rs),
            timeout_s=10,
            what="the edited endpoint headers in use after resume",
        )
    finally:
        produced = load.stop()
    counts = check_delivery(endpoint, produced)
    assert sum(c - 1 for c in counts.values()) == 0, "pause/resume redelivered acknowledged records"
