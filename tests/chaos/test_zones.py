"""Fault scenario across two zones (docs/zones.md): the session's broker is the cluster ``default``
(zone dc1), a broker of the test's own is ``dc2`` (zone dc2); workers a1, a2 are in dc1 and b1, b2
in dc2; each zone reaches ZooKeeper through its own proxy (tests/chaos/netsplit.py), so a whole
zone can be cut off from it. One subscription consumes the topic from both clusters under a steady
keyed load on each. Faults, in order:

1. kill -9 of every dc2 worker; they are started again once dc1 owns dc2's partitions (failover,
   then failback);
2. dc2's broker frozen (SIGSTOP) for 10 s: nothing may move, no duplicate in either cluster;
3. zone dc2 cut off from ZooKeeper beyond the session timeout, then healed: dc2's partitions move
   to dc1 while dc2's workers, fenced by their leases, push nothing, and come back after.

Each cluster's deliveries are judged on their own (tests/chaos/verdict.py): nothing lost, every
duplicate inside the window of a fault that touched its partition, per-key order, fencing (the
pushing process of every request against the owner timeline of its partition in ZooKeeper).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.devstack import embedded
from tests.chaos.conftest import fresh_database
from tests.chaos.harness import FLUSH_SLACK_S, SESSION_S, OwnerWatch, socket_owner
from tests.chaos.netsplit import NetSplit
from tests.chaos.verdict import Delivery, Fault, judge
from tests.support.cluster import Cluster, HealthProcess
from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic
from tests.support.load import Trickle
from tests.support.wait import until

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

PARTS = 6
RATE = 150
ZONE_OF = {"a1": "dc1", "a2": "dc1", "b1": "dc2", "b2": "dc2"}
HOME = {"default": {"a1", "a2"}, "dc2": {"b1", "b2"}}


class ZoneStack:
    """Two clusters, two zones, one subscription over both; faults by zone."""

    def __init__(self, tmp: Path, zk_port: int, default: str, dc2: str, db_url: str, ep: EndpointRecorder) -> None:
        clusters = {"dc2": {"bootstrap": dc2, "zone": "dc2"}}
        self.bootstrap = {"default": default, "dc2": dc2}
        self.cluster = Cluster(
            tmp,
            f"127.0.0.1:{zk_port}",
            default,
            db_url=db_url,
            FERRY_KAFKA_CLUSTERS=json.dumps(clusters),
            FERRY_DEFAULT_KAFKA_ZONE="dc1",
        )
        self.splits = {zone: NetSplit(zk_port).start() for zone in ("dc1", "dc2")}
        self.workers: dict[str, HealthProcess] = {}
        self.endpoint = ep
        ep.identify = lambda port: socket_owner(port, ep.port, self._pids())
        self.sub = f"zones-{secrets.token_hex(2)}"
        self.topic = f"chaos-{self.sub}"
        self.faults: dict[str, list[Fault]] = {"default": [], "dc2": []}

    def _pids(self) -> dict[int, str]:
        return {p.proc.pid: n for n, p in self.workers.items() if p.proc is not None and p.alive()}

    def start_worker(self, name: str) -> HealthProcess:
        zone = ZONE_OF[name]
        proc = self.cluster.worker(name, FERRY_ZONE=zone, FERRY_ZK_CONNECT=f"127.0.0.1:{self.splits[zone].port}")
        self.workers[name] = proc
        return proc

    def start(self) -> ZoneStack:
        for name in self.bootstrap.values():
            create_topic(name, self.topic, PARTS)
        self.watch = {c: OwnerWatch(self.cluster, self.sub, self.topic, PARTS, c) for c in self.bootstrap}
        self.cluster.add_subscription(
            {
                "name": self.sub,
                "topics": [self.topic],
                "clusters": ["default", "dc2"],
                "endpoint": {"url": self.endpoint.url},
            }
        )
        coordinators = [self.cluster.coordinator("coord-1"), self.cluster.coordinator("coord-2")]
        for name in ZONE_OF:
            self.start_worker(name)
        for p in [*coordinators, *self.workers.values()]:
            p.wait_ready(90)
        self.at_home(timeout_s=60)
        self.loads = {
            c: Trickle(b, self.topic, PARTS, RATE, keys=48, max_records=RATE * 300).start()
            for c, b in self.bootstrap.items()
        }
        self.started = time.time()
        self.flowing(self.started)
        return self

    # --- what ZooKeeper and the endpoint say ----------------------------------------------

    def owners(self, cluster: str) -> set[str]:
        return set(self.watch[cluster].owners().values())

    def at_home(self, timeout_s: float = 90.0) -> None:
        def home() -> bool:
            return all(
                len(self.watch[c].owners()) == PARTS and self.owners(c) == workers for c, workers in HOME.items()
            )

        until(home, timeout_s=timeout_s, what="each cluster's partitions on its own zone's workers", interval_s=0.2)

    def log(self, cluster: str) -> list[Delivery]:
        return [
            Delivery(r.partition, r.offset, r.key, r.at, r.status is not None and 200 <= r.status < 300, r.pusher)
            for r in self.endpoint.snapshot()
            if r.headers.get("ce-kafkatopic") == self.topic and r.headers.get("ce-kafkacluster", "default") == cluster
        ]

    def flowing(self, since: float, clusters: tuple[str, ...] = ("default", "dc2"), timeout_s: float = 90.0) -> float:
        """Wait until every partition of these clusters delivered a record received after ``since``."""

        def check() -> float | None:
            latest: dict[tuple[str, int], float] = {}
            for c in clusters:
                for d in self.log(c):
                    if d.ok and d.at > since:
                        latest.setdefault((c, d.partition), d.at)
            return max(latest.values()) if len(latest) == PARTS * len(clusters) else None

        return until(check, timeout_s=timeout_s, what="every partition delivering again", interval_s=0.2)

    @contextlib.contextmanager
    def fault(self, kind: str, touches: dict[str, frozenset[int]]) -> Iterator[None]:
        """A fault and its healing; its window ends once every partition is at home and delivering."""
        start = time.time()
        yield
        self.at_home()
        end = self.flowing(time.time())
        for cluster, partitions in touches.items():
            self.faults[cluster].append(Fault(kind, start, end, partitions))

    def judge_all(self) -> dict[str, dict[str, object]]:
        produced = {c: load.stop() for c, load in self.loads.items()}
        for c in produced:
            until(
                lambda c=c: produced[c] <= {(d.partition, d.offset) for d in self.log(c) if d.ok},  # type: ignore[misc]
                timeout_s=120,
                what=f"every record of {c} delivered",
                interval_s=0.5,
            )
        out = {}
        for c in produced:
            self.watch[c].stop()
            verdict = judge(
                produced[c], self.log(c), self.faults[c], slack_s=FLUSH_SLACK_S, ownership=self.watch[c].timeline()
            )
            figures = {"scenario": f"zones ({c})", **verdict.figures(), "seconds": round(time.time() - self.started, 1)}
            print(f"\nchaos {json.dumps(figures)}")
            path = os.environ.get("FERRY_CHAOS_REPORT")
            if path:
                with open(path, "a") as f:
                    f.write(json.dumps(figures) + "\n")
            problems = verdict.problems()
            assert not problems, f"zones ({c}): " + "; ".join(problems)
            out[c] = figures
        return out

    def close(self) -> None:
        for load in getattr(self, "loads", {}).values():
            load.stop()
        self.cluster.close()
        for s in self.splits.values():
            s.stop()


@pytest.fixture()
def zones(
    tmp_path: Path,
    zookeeper: embedded.ZooKeeperProcess,
    kafka_bootstrap: str,
    own_broker: embedded.ServiceProcess,
    endpoint: EndpointRecorder,
) -> Iterator[ZoneStack]:
    with fresh_database() as db_url:
        st = ZoneStack(tmp_path, zookeeper.port, kafka_bootstrap, f"127.0.0.1:{own_broker.port}", db_url, endpoint)
        try:
            yield st.start()
        finally:
            st.close()


def test_zone_failures(zones: ZoneStack, own_broker: embedded.ServiceProcess) -> None:
    st = zones
    every = frozenset(range(PARTS))
    # 1. Every dc2 worker killed; failover to dc1, then failback when they return.
    assert st.owners("dc2") == HOME["dc2"]
    with st.fault("kill-9-zone dc2", {"dc2": every}):
        killed_at = time.time()
        for name in ("b1", "b2"):
            st.workers[name].kill(signal.SIGKILL)
        until(lambda: st.owners("dc2") <= HOME["default"], timeout_s=SESSION_S + 10, what="dc2's partitions in dc1")
        failover_s = time.time() - killed_at
        st.flowing(time.time(), ("dc2",))
        for name in ("b1", "b2"):
            st.start_worker(name).wait_ready(60)
    print(f"\nzones: kill -9 of zone dc2 → its partitions owned in dc1 after {failover_s:.2f} s")
    assert failover_s < SESSION_S + 2

    # 2. dc2's broker frozen for 10 s: nothing moves; the default cluster does not pause.
    with st.fault("freeze-broker dc2", {"default": frozenset(), "dc2": frozenset()}):
        frozen_at = time.time()
        own_broker.kill(signal.SIGSTOP)
        try:
            until(lambda: time.time() > frozen_at + 10, timeout_s=15, what="10 s frozen")
        finally:
            own_broker.kill(signal.SIGCONT)
        thawed_at = time.time()
    times = sorted(d.at for d in st.log("default") if d.ok and frozen_at <= d.at <= thawed_at)
    gap = max(b - a for a, b in zip([frozen_at, *times], [*times, thawed_at], strict=True))
    print(f"zones: dc2's broker frozen 10 s → default's longest gap {gap:.2f} s")
    assert gap < 1.0

    # 3. Zone dc2 cut off from ZooKeeper beyond its session: fenced, moved to dc1, back when healed.
    with st.fault("zk-partition-zone dc2", {"dc2": every}):
        st.splits["dc2"].cut()
        try:
            until(lambda: st.owners("dc2") <= HOME["default"], timeout_s=SESSION_S * 4, what="dc2's partitions in dc1")
            st.flowing(time.time(), ("dc2",))
        finally:
            st.splits["dc2"].heal()

    figures = st.judge_all()
    assert figures["dc2"]["faults"] == 3 and figures["default"]["duplicates"] == 0
