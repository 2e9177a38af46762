"""Mutation check of the in-process runner tests: break the runner's (or a delivery's) ordering,
acking or watermark in one place at a time and show that tests/unit/test_runner.py fails for each.

    python -m tests.support.mutate

Each mutation edits one source file, runs the runner tests in a subprocess, and restores the
file (also when interrupted). Exit code 1 when a mutation survives.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTATIONS = [
    (
        "a taken lane stays ready: the next record of a key starts before the previous one ends",
        "worker/window.py",
        "            item = queue.popleft()\n            if not queue:\n                del self._lanes[lane]\n",
        "            item = queue.popleft()\n            if not queue:\n                del self._lanes[lane]\n"
        "            else:\n                self._ready.append(lane)\n",
    ),
    (
        "an out-of-order ack moves the watermark (committed jumps over a hole)",
        "worker/offset_merge.py",
        "        if offset != committed:\n            if offset > committed:",
        "        if offset != committed:\n            if offset > committed:\n"
        "                self.committed = offset + 1\n                return",
    ),
    (
        "a dead-lettered record is never acknowledged",
        "worker/single_delivery.py",
        "        port.acknowledged(record, dead, deferred)",
        "        if not dead:\n            port.acknowledged(record, dead, deferred)",
    ),
    (
        "a retry is not waited for",
        "worker/single_delivery.py",
        "            await asyncio.sleep(decision.delay_s)",
        "            await asyncio.sleep(0)",
    ),
    (
        "a batch's records to push again are dropped",
        "worker/batch_delivery.py",
        "            records, pushes, charged = again_records, again_pushes, again_charged",
        "            records, pushes, charged = [], [], []",
    ),
    (
        "a batch's dead letters are never acknowledged",
        "worker/batch_delivery.py",
        "            if dead:\n                runner.acknowledged_many(dead, dead=True)",
        "            if False:\n                runner.acknowledged_many(dead, dead=True)",
    ),
    (
        "the filter is ignored",
        "worker/partition.py",
        "            if admission is not None and not admission.admits(r):",
        "            if False:",
    ),
]


def main() -> int:
    survived = 0
    for what, rel, old, new in MUTATIONS:
        path = ROOT / rel
        original = path.read_text()
        assert original.count(old) == 1, f"mutation anchor not found once in {rel}: {old!r}"
        try:
            path.write_text(original.replace(old, new))
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/unit/test_runner.py"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            path.write_text(original)
        caught = run.returncode != 0
        survived += not caught
        print(f"{'caught  ' if caught else 'SURVIVED'} {what}")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
