"""A Ferry cluster of real processes for integration tests: coordinators and workers over the
test ZooKeeper and broker, subscriptions in a migrated SQLite (or MariaDB) database."""

from __future__ import annotations

import json
import secrets
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from ferry import db, zkpaths
from ferry.devstack import embedded
from ferry.migrations import runner
from ferry.subscription import parse
from tests.support.worker import WorkerProcess


class HealthProcess(WorkerProcess):
    """A service whose /readyz answers on its metrics port."""


class Cluster:
    def __init__(self, tmp: Path, zk_connect: str, bootstrap: str, db_url: str | None = None, **env: str) -> None:
        self.tmp = tmp
        self.name = f"c{secrets.token_hex(3)}"
        self.db_url = db_url or f"sqlite:///{tmp}/meta.db"
        runner.upgrade(self.db_url)
        self.engine = db.make_engine(self.db_url)
        self.offsets_topic = f"__offsets-{self.name}"
        self.bootstrap = bootstrap
        self.env = {
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_CLUSTER": self.name,
            "FERRY_KAFKA_BOOTSTRAP": bootstrap,
            "FERRY_DB_URL": self.db_url,
            "FERRY_OFFSETS_TOPIC": self.offsets_topic,
            "FERRY_ZK_SESSION_TIMEOUT_MS": "4000",
            "FERRY_SUBSCRIPTION_POLL_MS": "1000",
            "FERRY_TOPIC_POLL_MS": "1000",
            "FERRY_OFFSET_FLUSH_INTERVAL_MS": "200",
            "FERRY_DRAIN_TIMEOUT_MS": "3000",
            "FERRY_LOG_FORMAT": "text",
            # Ferry's own work (delay store, transaction checks) shares the session's broker topics:
            # only the tests of that work turn it on, each with topics of its own.
            "FERRY_INTERNAL_WORK": "false",
            **env,
        }
        self.zk = KazooClient(hosts=zk_connect)
        self.zk.start(15)
        self.processes: list[embedded.ServiceProcess] = []

    def _service(
        self, role: str, name: str, port_var: str, extra: dict[str, str], port: int | None = None
    ) -> HealthProcess:
        port = port or embedded.free_port()
        proc = HealthProcess(
            name,
            [sys.executable, "-m", "ferry.cli", role],
            port,
            self.tmp / f"{name}.log",
            env={**self.env, port_var: str(port), **extra},
        )
        self.processes.append(proc)
        proc.start()
        return proc

    def coordinator(self, name: str = "coord", port: int | None = None, **env: str) -> HealthProcess:
        return self._service("coordinator", name, "FERRY_COORDINATOR_METRICS_PORT", env, port)

    def worker(self, name: str, port: int | None = None, **env: str) -> HealthProcess:
        return self._service("worker", name, "FERRY_WORKER_METRICS_PORT", {"FERRY_WORKER_ID": name, **env}, port)

    def add_subscription(self, doc: dict[str, Any]) -> None:
        sub = parse(doc)
        with db.session(self.engine) as s:
            db.insert_subscription(s, sub)
        self.touch()

    def set_state(self, name: str, state: str) -> None:
        with db.session(self.engine) as s:
            row = db.get_row(s, name)
            assert row is not None
            db.update_subscription(s, row, row.to_subscription().with_state(state))
        self.touch()

    def edit(self, name: str, **changes: Any) -> None:
        with db.session(self.engine) as s:
            row = db.get_row(s, name)
            assert row is not None
            current = row.to_subscription()
            doc = {**current.to_doc(mask_secrets=False), **changes}
            db.update_subscription(s, row, parse(doc))
        self.touch()

    def delete_subscription(self, name: str) -> None:
        with db.session(self.engine) as s:
            row = db.get_row(s, name)
            assert row is not None
            s.delete(row)
        self.touch()

    def touch(self) -> None:
        path = zkpaths.subscriptions_changed(self.name)
        self.zk.ensure_path(path)
        self.zk.set(path, str(int(time.time() * 1000)).encode())

    def assignment(self) -> dict[tuple[str, str, int], str]:
        """partition → worker, as the leader published it."""
        out: dict[tuple[str, str, int], str] = {}
        base = zkpaths.assignments(self.name)
        if not self.zk.exists(base):
            return out
        for w in self.zk.get_children(base):
            raw, _ = self.zk.get(f"{base}/{w}")
            for p in json.loads(raw or b"{}").get("partitions", []):
                out[(p["subscription"], p["topic"], p["partition"])] = w
        return out

    def owners(self, sub: str, topic: str, partitions: int) -> dict[int, str | None]:
        out: dict[int, str | None] = {}
        for p in range(partitions):
            path = zkpaths.owner(self.name, sub, topic, p)
            stat = self.zk.exists(path)
            out[p] = json.loads(self.zk.get(path)[0])["worker"] if stat else None
        return out

    def leader(self) -> str | None:
        path = zkpaths.leader(self.name)
        if not self.zk.exists(path):
            return None
        return str(json.loads(self.zk.get(path)[0])["pid"])

    def close(self) -> None:
        for p in reversed(self.processes):
            p.stop(grace_s=15)
        self.zk.stop()
        self.zk.close()
        self.engine.dispose()


def internal_work_env(**more: str) -> dict[str, str]:
    """Settings of a cluster that runs Ferry's own work (the delay store, the back-checks) over
    topics of its own, so that tests sharing the broker never see each other's."""
    tag = secrets.token_hex(3)
    return {
        "FERRY_INTERNAL_WORK": "true",
        "FERRY_DELAY_TOPIC": f"delay-{tag}",
        "FERRY_TXN_TOPIC": f"txn-{tag}",
        "FERRY_IDEMPOTENCY_TOPIC": f"idem-{tag}",
        **more,
    }


def readyz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False
