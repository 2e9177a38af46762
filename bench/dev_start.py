"""Newcomer path timing: from starting ``ferry dev --demo`` to the first record at the echo endpoint.

    python3 -m bench.dev_start [--runs 3]

Starts ``python -m ferry.cli dev --demo`` (all ports 0, a temporary --data-dir), prints the time
to state.json (ready) and to the first record the demo echo endpoint received, then stops it
with SIGTERM. Baseline: the README's goal of < 60 s from first command to first record.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _results

GOAL_S = 60.0


def one_run(tmp: Path, timeout_s: float = 120.0) -> tuple[float, float]:
    data = tmp / "dev"
    argv = [
        sys.executable,
        "-m",
        "ferry.cli",
        "dev",
        "--demo",
        "--portal-port",
        "0",
        "--gateway-port",
        "0",
        "--kafka-port",
        "0",
    ]
    argv += ["--zk-port", "0", "--data-dir", str(data)]
    t0 = time.monotonic()
    with (tmp / "dev.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = t0 + timeout_s
        state = data / "state.json"
        while not state.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"ferry dev did not get ready; see {tmp / 'dev.log'}")
            time.sleep(0.05)
        ready_s = time.monotonic() - t0
        echo = json.loads(state.read_text())["demo_endpoint_url"]
        while True:
            with urllib.request.urlopen(echo + "/", timeout=2) as r:
                if json.load(r)["received"] > 0:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("no demo record reached the echo endpoint")
            time.sleep(0.05)
        return ready_s, time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    runs = ap.parse_args().runs
    results: list[tuple[float, float]] = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="ferry-bench-dev-") as tmp:
            ready_s, first_s = one_run(Path(tmp))
        results.append((ready_s, first_s))
        print(f"run {i + 1}: ready (state.json) {ready_s:.1f} s, first demo record {first_s:.1f} s")
    firsts = [f for _, f in results]
    print(
        f"first record: median {statistics.median(firsts):.1f} s, max {max(firsts):.1f} s "
        f"(goal < {GOAL_S:.0f} s: {'met' if max(firsts) < GOAL_S else 'MISSED'})"
    )
    _results.save(
        "dev_start",
        f"python3 -m bench.dev_start --runs {runs}",
        ["`ferry dev --demo`", *(f"run {i + 1}" for i in range(runs))],
        [
            ["ready (state.json)", *(f"{ready:.1f} s" for ready, _ in results)],
            ["first demo record at the echo endpoint", *(f"{first:.1f} s" for _, first in results)],
        ],
    )


if __name__ == "__main__":
    main()
