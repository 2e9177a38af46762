"""``ferry dev`` as a test fixture: started with every port 0, ready when state.json appears.

    with DevStack(tmp_path, workers=2) as stack:
        stack.state["portal_url"], stack.state["admin_token"], ...

Leaving the block sends SIGTERM to ``ferry dev``, expects exit code 0 and asserts that no child
listed in state.json (nor anything in its process group) survives; stragglers are killed so a
failing test never leaks processes onto the shared machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


class DevStack:
    def __init__(
        self,
        tmp: Path,
        workers: int = 2,
        demo: bool = False,
        ready_timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.env = {**os.environ, **(env or {})}
        self.args = args or []
        self.dir = tmp / "ferry-dev"
        self.workers = workers
        self.demo = demo
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.state: dict[str, Any] = {}
        self.log = tmp / "ferry-dev.log"
        self.crashed = False

    def __enter__(self) -> DevStack:
        argv = [
            sys.executable,
            "-m",
            "ferry.cli",
            "dev",
            "--workers",
            str(self.workers),
            "--portal-port",
            "0",
            "--gateway-port",
            "0",
            "--kafka-port",
            "0",
            "--zk-port",
            "0",
            "--data-dir",
            str(self.dir),
        ]
        if self.demo:
            argv.append("--demo")
        argv += self.args
        (self.dir / "state.json").unlink(missing_ok=True)  # an earlier run's, in the same directory
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + self.ready_timeout_s
        state = self.dir / "state.json"
        while not state.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"ferry dev did not get ready:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.2)
        self.state = json.loads(state.read_text())
        return self

    def pids(self) -> list[int]:
        return [p["pid"] for p in self.state.get("processes", []) if p.get("pid")]

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def crash(self) -> None:
        """kill -9 ``ferry dev`` itself: no clean shutdown; its children must still die."""
        assert self.proc is not None
        self.crashed = True
        self.proc.kill()
        self.proc.wait(10)

    def survivors(self) -> list[int]:
        """Children from state.json whose process or process group still exists."""
        return [pid for pid in self.pids() if alive(pid) or group_alive(pid)]

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        state = self.dir / "state.json"
        with contextlib.suppress(OSError, ValueError):
            self.state = json.loads(state.read_text())  # restarted children have new pids
        code = self.stop()
        deadline = time.monotonic() + 15
        while self.survivors() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = self.survivors()
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if exc_type is None:
            assert self.crashed or code == 0, f"ferry dev exited with {code}:\n{self.log.read_text()[-4000:]}"
            assert not left, f"children survived ferry dev: {left}"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    with contextlib.suppress(OSError):
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    return False


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process is left in process group ``pgid``."""
    for status in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = status.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False
