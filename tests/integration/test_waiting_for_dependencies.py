"""A worker with no ZooKeeper or Kafka to reach waits for them with one line per attempt naming the
setting and the address (never a traceback), answers its health and stats routes meanwhile, and
stops promptly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ferry.devstack import embedded
from tests.support.wait import until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("role", "setting"), [("worker", "FERRY_KAFKA_BOOTSTRAP"), ("coordinator", "FERRY_ZK_CONNECT")]
)
def test_waits_with_one_line_per_attempt_and_stops_on_sigterm(tmp_path: Path, role: str, setting: str) -> None:
    dead = f"127.0.0.1:{embedded.free_port()}"
    port = embedded.free_port()
    log = tmp_path / f"{role}.log"
    env = {
        **os.environ,
        "FERRY_LOG_FORMAT": "text",
        "FERRY_ZK_CONNECT": dead,
        "FERRY_KAFKA_BOOTSTRAP": dead,
        "FERRY_DB_URL": f"sqlite:///{tmp_path}/m.db",
        "FERRY_WORKER_METRICS_PORT": str(port),
        "FERRY_COORDINATOR_METRICS_PORT": str(port),
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ferry.cli", role], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        until(lambda: setting in log.read_text(), timeout_s=40, what=f"a line naming {setting}")
        line = next(x for x in log.read_text().splitlines() if setting in x)
        assert "unreachable" in line and dead in line
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 503
        if role == "worker":
            stats = httpx.get(f"http://127.0.0.1:{port}/stats", timeout=5)
            assert stats.status_code == 200, stats.text
            assert stats.json()["partitions"] == [] and stats.json()["internal"] == {}
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert time.monotonic() - started < 20
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize(
    ("role", "setting"),
    [
        ("portal", "FERRY_PORTAL_PORT"),
        ("gateway", "FERRY_GATEWAY_PORT"),
        ("worker", "FERRY_WORKER_METRICS_PORT"),
        ("coordinator", "FERRY_COORDINATOR_METRICS_PORT"),
    ],
)
def test_a_taken_port_stops_the_service_naming_the_setting(
    tmp_path: Path, zk_connect: str, kafka_bootstrap: str, role: str, setting: str
) -> None:
    """Not a traceback of the bind: one line saying which setting to change, exit code 2."""
    import socket

    from ferry.migrations import runner

    db_url = f"sqlite:///{tmp_path}/m.db"
    runner.upgrade(db_url)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **os.environ,
            "FERRY_LOG_FORMAT": "text",
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_KAFKA_BOOTSTRAP": kafka_bootstrap,
            "FERRY_DB_URL": db_url,
            "FERRY_ADMIN_TOKEN": "port-test",
            "FERRY_PORTAL_PORT": "0",
            "FERRY_GATEWAY_PORT": "0",
            "FERRY_WORKER_METRICS_PORT": "0",
            "FERRY_COORDINATOR_METRICS_PORT": "0",
            setting: str(port),
        }
        done = subprocess.run(
            [sys.executable, "-m", "ferry.cli", role], capture_output=True, text=True, env=env, timeout=60
        )
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert f"ferry {role}: {setting}: cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "Traceback" not in output, output[-3000:]


def test_a_worker_waiting_for_its_id_stops_on_sigterm(tmp_path: Path, zk_connect: str, kafka_bootstrap: str) -> None:
    """A second worker with a FERRY_WORKER_ID that a live worker holds waits for it to go
    (`worker.id_in_use`); a SIGTERM meanwhile ends it promptly with exit code 0."""
    from tests.support.cluster import Cluster

    cluster = Cluster(tmp_path, zk_connect, kafka_bootstrap)
    try:
        first = cluster.worker("same-id")
        until(lambda: "worker.registered" in first.log_path.read_text(), timeout_s=60, what="the first worker")
        second = cluster.worker("same-id-again", FERRY_WORKER_ID="same-id")
        until(lambda: "worker.id_in_use" in second.log_path.read_text(), timeout_s=60, what="the id in use")
        assert second.proc is not None
        started = time.monotonic()
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(30) == 0, second.log_path.read_text()[-3000:]
        assert time.monotonic() - started < 20
        assert first.alive()
    finally:
        cluster.close()
