"""Running a bench from a test: in its own process, from the checkout, with its result saved to
the test's folder (``FERRY_BENCH_RESULTS``), never to bench/results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(results: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python3 *argv`` from the checkout's root; its exit status is the caller's to judge."""
    env = {**os.environ, "FERRY_BENCH_RESULTS": str(results), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
