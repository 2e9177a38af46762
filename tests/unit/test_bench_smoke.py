"""The in-process benches still run: each, at a size of a second or so, ends with exit 0, and one
that saves a result saves it (to this test's own folder, never bench/results). A bench that
silently hangs or breaks after a refactor is found here rather than by the next person measuring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    "filter": ["--records", "2000", "--worker-records", "2000", "--repeat", "1"],
    "planner": ["--partitions", "2000", "--workers", "20"],
    "offset_merge": ["--acks", "20000"],
    "encode": ["--batches", "20", "--repeat", "2"],
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bench_runs_and_saves_its_result(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "FERRY_BENCH_RESULTS": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *SMALL[name]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    saved = list(tmp_path.glob("*.json"))
    assert bool(saved) == ("_results.save" in (ROOT / "bench" / f"{name}.py").read_text()), done.stdout[-2000:]
    for path in saved:
        doc = json.loads(path.read_text())
        assert doc["rows"] and doc["command"].startswith(("python3 -m bench.", "python3 bench/")), doc
