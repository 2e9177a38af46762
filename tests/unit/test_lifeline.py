"""A service started by `ferry dev` ends when `ferry dev` is gone (ferry/lifeline.py): a middle
process starts a child with FERRY_PARENT_PID set and exits at once, as a killed `ferry dev` would;
the child must get SIGTERM, and, if its stop hangs, end after the grace with its stacks written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry import lifeline
from tests.support.wait import until

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import os, signal, sys, time
from ferry import lifeline
lifeline.GRACE_S, lifeline.POLL_S = 0.5, 0.05
def on_term(*_):
    os.write(1, b"child: sigterm\n")  # not print: the handler may interrupt a print
    if {stops}:
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
lifeline.hold()
print("child: holding", flush=True)
for _ in range(600):  # a stop that never ends, when it does not exit on SIGTERM
    time.sleep(0.05)
"""

MIDDLE = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, "FERRY_PARENT_PID": str(os.getpid())},
                         stdout=open(sys.argv[2], "wb"), stderr=subprocess.STDOUT)
print(child.pid, flush=True)
"""


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def orphan(tmp_path: Path, stops: bool) -> tuple[int, Path]:
    out = tmp_path / "child.log"
    middle = subprocess.run(
        [sys.executable, "-c", MIDDLE, CHILD.format(stops=stops), str(out)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert middle.returncode == 0, middle.stderr
    return int(middle.stdout.strip()), out


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_child_whose_stop_hangs_ends_after_the_grace_with_its_stacks(tmp_path: Path) -> None:
    pid, out = orphan(tmp_path, stops=False)
    until(lambda: gone(pid), timeout_s=15, what="the orphaned child to end")
    log = out.read_text()
    assert "lifeline.parent_gone" in log and "child: sigterm" in log, log
    assert "lifeline.stop_overdue" in log and 'File "<string>"' in log, log  # the stacks


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_a_child_that_stops_on_sigterm_is_not_cut_short(tmp_path: Path) -> None:
    pid, out = orphan(tmp_path, stops=True)
    until(lambda: gone(pid), timeout_s=15, what="the orphaned child to end")
    time.sleep(0.6)  # past the grace: had it still been running, the overdue line would be written
    log = out.read_text()
    assert "child: sigterm" in log and "lifeline.stop_overdue" not in log, log


def test_a_service_not_started_by_ferry_dev_is_not_watched() -> None:
    assert lifeline.hold({}) is None and lifeline.hold({"FERRY_PARENT_PID": "x"}) is None


TIED_PARENT = """
import sys, time
from pathlib import Path
from ferry.devstack import embedded
embedded.tie_children()
child = embedded.ServiceProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"], 0, Path(sys.argv[1]))
print(child.start().proc.pid, flush=True)
time.sleep(120)  # killed -9 by the test long before
"""


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_program_leaves_no_child_behind_when_killed(tmp_path: Path, tied: bool) -> None:
    """What the benchmarks do (``embedded.tie_children``): kill -9 of the bench ends its helpers."""
    code = TIED_PARENT if tied else TIED_PARENT.replace("embedded.tie_children()", "")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "child.log")], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait(10)
    try:
        if tied:
            until(lambda: gone(child), timeout_s=10, what="the child of a killed tied program to end")
        else:
            time.sleep(0.5)  # the control: an untied child lives on
            assert not gone(child)
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)
