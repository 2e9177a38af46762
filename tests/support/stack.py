"""``ferry dev`` as a test fixture: started with every port 0, ready when state.json appears."""

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
    def __init__(self, tmp: Path, workers: int = 2, demo: bool = False, ready_timeout_s: float = 120.0) -> None:
        self.dir = tmp / "ferry-dev"
        self.workers = workers
        self.demo = demo
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.state: dict[str, Any] = {}
        self.log = tmp / "ferry-dev.log"

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
            "--kafka-port",
            "0",
            "--zk-port",
            "0",
            "--data-dir",
            str(self.dir),
        ]
        if self.demo:
            argv.append("--demo")
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
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

    def __exit__(self, *exc: object) -> None:
        self.stop()
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    with contextlib.suppress(OSError):
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    return False
