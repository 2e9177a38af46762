"""Fault scenarios that stop a service: a private ZooKeeper and a private MariaDB server for this
module's stack (2 coordinators, 3 workers, the session's broker), so the shared ones never go away
under the rest of the suite. Each service is stopped and started again on the same port and data dir.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ferry.devstack import embedded
from tests.chaos.harness import SESSION_S, ChaosStack
from tests.chaos.private_db import PrivateMariaDB
from tests.support.endpoint import EndpointRecorder
from tests.support.wait import until

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


class Private:
    def __init__(self, base: Path, kafka_bootstrap: str) -> None:
        self.base = base
        self.zk_port = embedded.free_port()
        self.zk = embedded.zookeeper(base / "zk", self.zk_port)
        self.db = PrivateMariaDB.install(base / "mariadb")
        self.bootstrap = kafka_bootstrap

    def restart_zk(self) -> None:
        self.zk = embedded.zookeeper(self.base / "zk", self.zk_port)  # same data dir, same port
        self.zk.start().wait_ready(90)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> Iterator[tuple[Private, ChaosStack]]:
    svc = Private(tmp_path_factory.mktemp("chaos-private"), kafka_bootstrap)
    svc.zk.start()
    svc.db.start()
    st: ChaosStack | None = None
    try:
        svc.zk.wait_ready(90)
        svc.db.wait_ready(90)
        with EndpointRecorder() as ep:
            st = ChaosStack(svc.base / "stack", svc.zk_port, kafka_bootstrap, svc.db.database("ferry"), ep)
            yield svc, st.start()
    finally:
        if st is not None:
            st.close()
        svc.zk.stop()
        svc.db.stop(grace_s=30)


def test_zookeeper_restart(private: tuple[Private, ChaosStack]) -> None:
    """ZooKeeper stops for longer than the workers' lease and comes back with the same data: sessions
    survive (the server restores them), pushes pause while no lease can be renewed, then resume."""
    svc, stack = private
    # The harness's own ZooKeeper client loses its watches' events during the outage: no fencing timeline.
    with stack.scenario("zk-restart", check_fencing=False) as sc, sc.fault("zk-restart"):
        svc.zk.stop()
        time.sleep(SESSION_S * 1.25)  # the outage: no sleep-and-hope, the verdict waits on conditions
        svc.restart_zk()
        until(lambda: stack.cluster.zk.connected, timeout_s=60, what="the harness reconnected")


def test_mariadb_stop_and_restart(private: tuple[Private, ChaosStack]) -> None:
    """The metadata database goes away: delivery goes on from what the coordinators and workers already
    know; after it is back the leader reads the catalog again (the scenario's pause at the end needs it)."""
    svc, stack = private
    with stack.scenario("mariadb-restart") as sc:
        marks = {n: len(p.log_path.read_text(errors="replace")) for n, p in stack.coordinators.items()}
        with sc.fault("mariadb-stop", partitions=frozenset()):  # nothing moves: no duplicate allowed
            svc.db.stop(grace_s=30)
            stopped_at = time.time()
            leader = stack.leader_name()
            assert leader is not None
            leader_log = stack.coordinators[leader].log_path
            until(
                lambda: "catalog.database_unavailable" in leader_log.read_text(errors="replace")[marks[leader] :],
                timeout_s=30,
                what="the leader notices the outage",
            )
            sc.wait_flowing(stopped_at)  # delivery goes on without the database
            until(lambda: time.time() > stopped_at + 6, timeout_s=10, what="a 6 s outage")
            sc.wait_flowing(stopped_at + 5)
            svc.db.start().wait_ready(90)
            until(
                lambda: "catalog.database_recovered" in leader_log.read_text(errors="replace")[marks[leader] :],
                timeout_s=60,
                what="the leader reads the catalog again",
            )
