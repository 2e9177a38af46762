"""``ferry dev``: the whole embedded stack on one machine, supervised (docs/contract.md §1).

Starts a real ZooKeeper server and a Kafka-protocol broker under ``--data-dir``, migrates an
SQLite metadata database, then runs one coordinator, N workers and the portal as child
processes. A child that crashes is restarted (with backoff) and reported. When everything is
ready — portal healthy, a leader elected, every worker registered — ``state.json`` is written
and the connection details are printed. SIGINT/SIGTERM stop the children in order (portal,
workers draining, coordinator, broker, ZooKeeper) and exit 0; every child also gets SIGTERM
from the kernel if ``ferry dev`` itself is killed, so none outlives it.

States: starting → ready (state.json written) → stopping → stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ferry import delay, kafka, log, zkpaths
from ferry.config import Settings
from ferry.devstack import embedded
from ferry.errors import ConfigError, FerryError

_log = log.get_logger(__name__)
WATCH_EVERY_S = 5.0
"""How often ``ferry dev`` looks for failing subscriptions to report in its console."""
READY_TIMEOUT_S = 90.0
RESTART_BACKOFF_S = (1.0, 2.0, 5.0, 10.0)


STABLE_AFTER_S = 60.0


def restart_delay_s(crashes_in_a_row: int, backoff_s: tuple[float, ...] = RESTART_BACKOFF_S) -> float:
    """Delay before restarting a child after its ``crashes_in_a_row``-th crash (1-based).

    Grows along ``backoff_s`` and stays at its last step, so a child crashing in a loop is
    retried every few seconds instead of spinning the machine.
    """
    if crashes_in_a_row < 1:
        raise ValueError("crashes_in_a_row must be >= 1")
    return backoff_s[min(crashes_in_a_row, len(backoff_s)) - 1]


def crashes_in_a_row(previous: int, ran_s: float, stable_after_s: float = STABLE_AFTER_S) -> int:
    """Count this crash: a child that had run ``stable_after_s`` starts again at the first step."""
    return 1 if ran_s >= stable_after_s else previous + 1


class _Stopping(Exception):
    """SIGINT/SIGTERM arrived before the stack was ready: stop cleanly, exit 0."""


class Child:
    """One supervised child process and its restart history."""

    def __init__(self, proc: embedded.ServiceProcess, role: str, ident: str | None = None) -> None:
        self.proc = proc
        self.role = role
        self.id = ident
        self.restarts = 0
        self.next_restart = 0.0
        self.crashes = 0
        self.started_at = time.monotonic()

    def describe(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"role": self.role, "pid": self.proc.proc.pid if self.proc.proc else None}
        if self.id:
            doc["id"] = self.id
        if self.restarts:
            doc["restarts"] = self.restarts
        return doc


def _port(value: int, flag: str) -> int:
    """The port to use for ``flag``: ``0`` picks a free one; a taken or invalid port is refused."""
    if not 0 <= value <= 65535:
        raise ConfigError(flag, f"{value} is not a TCP port; pass 1-65535, or 0 for a free one")
    if value == 0:
        return embedded.free_port()
    if embedded.port_open(value):
        raise ConfigError(flag, f"port {value} is already in use; pass another port or 0 for a free one")
    return value


def resolve_ports(flags: dict[str, int]) -> dict[str, int]:
    """The port of each flag (``{"--zk-port": 2181, ...}``) as :func:`_port` gives it, and none
    twice: two services given the same port would have one of them fail to listen while the other
    answers for both."""
    given: dict[int, str] = {}
    for flag, value in flags.items():
        if value and value in given:
            raise ConfigError(
                flag, f"port {value} is also given to {given[value]}; pass another port or 0 for a free one"
            )
        given[value] = flag
    out: dict[str, int] = {}
    for flag, value in flags.items():
        port = _port(value, flag)
        while value == 0 and port in given:  # a free port now, but another flag's to come
            port = _port(0, flag)
        out[flag] = port
    return out


def parse_topic(text: str) -> tuple[str, int]:
    """``--topic NAME[:PARTITIONS]``: the topic to create and its partition count (default 1)."""
    name, sep, count = text.partition(":")
    if not delay.valid_topic_name(name):
        raise ConfigError("--topic", f"{name!r} is not a Kafka topic name (letters, digits, . _ -)")
    if not sep:
        return name, 1
    if not count.isdigit() or not 1 <= int(count) <= 1000:
        raise ConfigError("--topic", f"{text!r}: the partition count after ':' must be 1-1000")
    return name, int(count)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310 - loopback URL we built
            return bool(r.status == 200)
    except OSError:
        return False


def _get_json(url: str, token: str) -> Any:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310 - loopback URL
    with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310
        return json.loads(r.read())


def _post_json(url: str, token: str, doc: dict[str, Any], method: str = "POST") -> int:
    req = urllib.request.Request(  # noqa: S310 - loopback URL we built
        url,
        data=json.dumps(doc).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class DevStack:
    def __init__(self, settings: Settings, args: argparse.Namespace) -> None:
        self.settings = settings
        self.args = args
        self.dir = Path(args.data_dir).resolve()
        self.children: list[Child] = []
        self.infra: list[embedded.ServiceProcess] = []
        self.stop = threading.Event()
        self.state: dict[str, Any] = {}

    def _python(self, role: str, argv: list[str], env: dict[str, str], ident: str | None = None) -> Child:
        name = ident or role
        proc = embedded.ServiceProcess(
            name, [sys.executable, *argv], 0, self.dir / "logs" / f"{name}.log", env=env, die_with_parent=True
        )
        child = Child(proc, role, ident)
        self.children.append(child)
        proc.start()
        return child

    def service_argv(self, command: str) -> list[str]:
        """How a Ferry service is started: with ``ferry dev``'s own ``--config`` file, if any, so
        the file's settings reach every service (the environment ``ferry dev`` gives it still wins)."""
        argv = ["-m", "ferry.cli", command]
        config_file = getattr(self.args, "config", None)
        if config_file:
            argv += ["--config", str(Path(config_file).resolve())]
        return argv

    def start(self) -> None:
        a = self.args
        if a.workers < 1:
            raise ConfigError("--workers", "must be at least 1")
        topics = [parse_topic(t) for t in getattr(a, "topic", [])]  # refused before anything starts
        ports = resolve_ports(
            {
                "--zk-port": a.zk_port,
                "--kafka-port": a.kafka_port,
                "--portal-port": a.portal_port,
                "--gateway-port": a.gateway_port,
            }
        )
        zk_port, kafka_port = ports["--zk-port"], ports["--kafka-port"]
        portal_port, gateway_port = ports["--portal-port"], ports["--gateway-port"]
        # Only now: a run refused for a busy port must leave the running stack's state.json alone.
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "state.json").unlink(missing_ok=True)
        except OSError as exc:
            raise ConfigError("--data-dir", f"cannot use {self.dir}: {exc.strerror or exc}; pass a directory") from None
        zk = embedded.zookeeper(self.dir / "zookeeper", zk_port)
        broker = embedded.kafka_broker(self.dir / "kafka", kafka_port)
        for p in (zk, broker):
            p.die_with_parent = True
            self.infra.append(p.start())
        zk.wait_ready(60)
        broker.wait_ready(60)
        db_url = f"sqlite:///{self.dir / 'ferry.db'}"
        from ferry.migrations import runner

        runner.upgrade(db_url)
        token = self.settings.portal.admin_token or "fy_" + secrets.token_urlsafe(24)
        bootstrap = f"127.0.0.1:{kafka_port}"
        zk_connect = f"127.0.0.1:{zk_port}"
        env = {
            "FERRY_ZK_CONNECT": zk_connect,
            "FERRY_KAFKA_BOOTSTRAP": bootstrap,
            "FERRY_DB_URL": db_url,
            "FERRY_CLUSTER": self.settings.cluster,
            "FERRY_OFFSETS_TOPIC": self.settings.kafka.offsets_topic,
            "FERRY_ADMIN_TOKEN": token,
            "FERRY_PORTAL_PORT": str(portal_port),
            "FERRY_PORTAL_HOST": "127.0.0.1",
            "FERRY_GATEWAY_PORT": str(gateway_port),
            "FERRY_GATEWAY_HOST": "127.0.0.1",
            "FERRY_WORKER_METRICS_PORT": "0",
            "FERRY_COORDINATOR_METRICS_PORT": "0",
            "FERRY_LOG_FORMAT": os.environ.get("FERRY_LOG_FORMAT", "text"),
            "FERRY_SUBSCRIPTION_POLL_MS": "2000",
            "FERRY_TOPIC_POLL_MS": "2000",
            "FERRY_ZK_SESSION_TIMEOUT_MS": "6000",
        }
        self._python("coordinator", self.service_argv("coordinator"), env)
        for i in range(1, a.workers + 1):
            wid = f"worker-{i}"
            self._python("worker", self.service_argv("worker"), {**env, "FERRY_WORKER_ID": wid}, wid)
        self._python("portal", self.service_argv("portal"), env)
        self._python("gateway", self.service_argv("gateway"), env)
        portal_url = f"http://127.0.0.1:{portal_port}"
        gateway_url = f"http://127.0.0.1:{gateway_port}"
        self.state = {
            "portal_url": portal_url,
            "gateway_url": gateway_url,
            "kafka_bootstrap": bootstrap,
            "zk_connect": zk_connect,
            "db_url": db_url,
            "admin_token": token,
            "cluster": self.settings.cluster,
            "offsets_topic": self.settings.kafka.offsets_topic,
        }
        self._wait_ready(zk_connect, portal_url, a.workers, gateway_url)
        for name, partitions in topics:
            kafka.ensure_topic({"bootstrap.servers": bootstrap}, name, partitions)
        self.state["topics"] = {name: partitions for name, partitions in topics}
        if a.demo:
            self._demo(bootstrap, portal_url, gateway_url, token)
        self._write_state()
        print(
            f"ferry dev is ready\n  portal:      {portal_url}  (admin token: {token})\n"
            f"  gateway:     {gateway_url}\n"
            f"  kafka:       {bootstrap}\n  zookeeper:   {zk_connect}\n  state:       {self.dir / 'state.json'}\n"
            + "".join(f"  topic:       {n} ({p} partition{'s' if p != 1 else ''})\n" for n, p in topics)
            + (f"  demo echo:   {self.state['demo_endpoint_url']}\n" if a.demo else "")
            + "Stop with Ctrl-C.",
            flush=True,
        )

    def _wait_ready(self, zk_connect: str, portal_url: str, workers: int, gateway_url: str) -> None:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=zk_connect)
        zk.start(30)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            c = self.settings.cluster
            while True:
                if self.stop.is_set():
                    raise _Stopping
                self._check_children()
                leader = zk.exists(zkpaths.leader(c)) is not None
                registered = len(zk.get_children(zkpaths.workers(c))) if zk.exists(zkpaths.workers(c)) else 0
                up = _http_ok(f"{portal_url}/healthz") and _http_ok(f"{gateway_url}/healthz")
                if leader and registered >= workers and up:
                    return
                if time.monotonic() > deadline:
                    raise FerryError(
                        f"the stack was not ready after {READY_TIMEOUT_S:.0f} s (leader={leader}, workers "
                        f"{registered}/{workers}); see the logs in {self.dir / 'logs'}"
                    )
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()

    def _demo(self, bootstrap: str, portal_url: str, gateway_url: str, token: str) -> None:
        from ferry.devstack import demo

        kafka.ensure_topic({"bootstrap.servers": bootstrap}, demo.DEMO_TOPIC, 4)
        echo_port = embedded.free_port()
        self._python("demo-echo", ["-m", "ferry.devstack.demo", "echo", "--port", str(echo_port)], {})
        echo_url = f"http://127.0.0.1:{echo_port}"
        deadline = time.monotonic() + 30
        while not _http_ok(echo_url + "/"):
            if self.stop.is_set():
                raise _Stopping
            if time.monotonic() > deadline:
                raise FerryError("the demo echo endpoint did not start")
            time.sleep(0.1)
        demo_cli = ["-m", "ferry.devstack.demo"]
        producer = [*demo_cli, "produce", "--gateway", gateway_url, "--rate", "5"]
        self._python("demo-producer", producer, {"FERRY_ADMIN_TOKEN": token})
        doc = {"name": demo.DEMO_SUBSCRIPTION, "topics": [demo.DEMO_TOPIC], "endpoint": {"url": f"{echo_url}/hook"}}
        status = _post_json(f"{portal_url}/api/v1/subscriptions", token, doc)
        if status == 409:
            # Kept from an earlier run in this data directory: point it at this run's echo endpoint.
            status = _post_json(f"{portal_url}/api/v1/subscriptions/{demo.DEMO_SUBSCRIPTION}", token, doc, method="PUT")
        if status not in (200, 201):
            raise FerryError(f"registering the demo subscription failed with HTTP {status}")
        self.state["demo_endpoint_url"] = echo_url

    def _write_state(self) -> None:
        infra = [{"role": p.name, "pid": p.proc.pid} for p in self.infra if p.proc is not None]
        self.state["processes"] = [c.describe() for c in self.children] + infra
        self.state["restarts"] = sum(c.restarts for c in self.children)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.dir / "state.json")

    def _check_children(self) -> bool:
        """Restart crashed children (with backoff); True when something changed."""
        changed = False
        now = time.monotonic()
        for c in self.children:
            if c.proc.alive():
                continue
            if c.next_restart == 0.0:
                code = c.proc.proc.returncode if c.proc.proc else None
                c.crashes = crashes_in_a_row(c.crashes, now - c.started_at)
                delay = restart_delay_s(c.crashes)
                c.next_restart = now + delay
                _log.error(
                    "dev.child_exited", role=c.role, id=c.id, code=code, restart_in_s=delay, log=str(c.proc.log_path)
                )
            elif now >= c.next_restart:
                c.restarts += 1
                c.next_restart = 0.0
                c.proc.start()
                c.started_at = time.monotonic()
                _log.warning(
                    "dev.child_restarted",
                    role=c.role,
                    id=c.id,
                    restarts=c.restarts,
                    pid=c.proc.proc.pid if c.proc.proc else None,
                )
                changed = True
        return changed

    def supervise(self) -> None:
        reported: set[str] = set()
        last_watch = time.monotonic()
        seen: dict[str, dict[str, float]] = {}
        while not self.stop.wait(0.5):
            if self.state and time.monotonic() - last_watch >= WATCH_EVERY_S:
                last_watch = time.monotonic()
                self._watch(seen)
            if self._check_children() and self.state:
                self._write_state()
            for p in self.infra:
                if not p.alive() and p.name not in reported:
                    # Not restarted: the broker keeps data in memory, a new one would be empty.
                    reported.add(p.name)
                    _log.error("dev.infra_exited", role=p.name, log=str(p.log_path), hint="restart ferry dev")

    def _watch(self, seen: dict[str, dict[str, float]]) -> None:
        """Print one line per subscription that is failing (retries, dead letters, a held partition)."""
        from ferry.devstack import watch

        url, token = str(self.state.get("portal_url")), str(self.state.get("admin_token"))
        try:
            subs = _get_json(f"{url}/api/v1/subscriptions", token)["subscriptions"]
            for sub in subs:
                name = sub["name"]
                now = watch.totals(_get_json(f"{url}/api/v1/subscriptions/{name}/status", token))
                # A subscription seen for the first time is compared with nothing done yet.
                before = seen.get(name, {"retried": 0, "dead_lettered": 0, "held": 0})
                line = watch.summary(name, before, now, WATCH_EVERY_S)
                seen[name] = now
                if line:
                    print(f"{line}; see {self.dir / 'logs'}", flush=True)
        except Exception as exc:  # the console summary is a convenience: never stop supervising for it
            _log.warning("dev.watch_failed", error=str(exc)[:200])

    def shutdown(self) -> None:
        order = ["demo-producer", "gateway", "portal", "worker", "demo-echo", "coordinator"]
        for role in order:
            for c in self.children:
                if c.role == role:
                    c.proc.stop(grace_s=20)
        for p in reversed(self.infra):
            p.stop(grace_s=10)
        _log.info("dev.stopped")


def main(settings: Settings, args: argparse.Namespace) -> int:
    stack = DevStack(settings, args)

    def on_signal(*_: Any) -> None:
        stack.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        stack.start()
        stack.supervise()
    except _Stopping:
        _log.info("dev.interrupted_before_ready")
    finally:
        stack.shutdown()
    return 0
