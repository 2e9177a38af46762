"""A coordinator's SIGTERM ends in bounded time even when ZooKeeper is gone: a kazoo client that
cannot reach its server may never finish stopping, so stopping leaves it behind after a bound
(the session expires on the server) and the process exits. The ZooKeeper here is the test's own
(it is killed), never the session's shared one."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from ferry.devstack import embedded
from ferry.zk import CLOSE_S
from tests.support.cluster import Cluster
from tests.support.wait import until

pytestmark = pytest.mark.integration
ELECTION_JOIN_S = 10.0  # coordinator/service.py waits this long for the election thread
SLACK_S = 8.0  # interpreter exit on a busy 2-core machine


def test_coordinator_sigterm_with_zookeeper_gone_exits_within_the_bound(tmp_path: Path, kafka_bootstrap: str) -> None:
    zk = embedded.zookeeper(tmp_path / "zk").start().wait_ready(60)
    cluster = Cluster(tmp_path, f"127.0.0.1:{zk.port}", kafka_bootstrap)
    try:
        coord = cluster.coordinator("coord")
        coord.wait_ready(60)
        until(lambda: cluster.leader() is not None, timeout_s=30, what="a leader")
        cluster.zk.stop()
        zk.kill()
        until(lambda: not embedded.port_open(zk.port), timeout_s=10, what="ZooKeeper gone")
        assert coord.proc is not None
        coord.proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        bound_s = ELECTION_JOIN_S + CLOSE_S + SLACK_S
        until(lambda: coord.proc.poll() is not None, timeout_s=bound_s, what="the coordinator to exit after SIGTERM")
        print(f"SIGTERM with ZooKeeper gone: exited in {time.monotonic() - sent:.1f} s (bound {bound_s} s)")
        assert coord.proc.returncode == 0, coord.log_tail()
        assert "coordinator.stopped" in coord.log_path.read_text()
    finally:
        cluster.close()
        zk.stop()
