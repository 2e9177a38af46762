"""`bench/batch.py --series` end to end at a small size: it starts its own broker and endpoint per
run, and the table it saves for docs/BENCHMARKS.md holds every run and the goal's verdict. A bench
that breaks after a refactor is found here rather than by the next person measuring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benches import run_bench

pytestmark = pytest.mark.integration


def test_series_saves_every_run_and_the_verdict(tmp_path: Path) -> None:
    argv = ["--records", "6000", "--partitions", "3", "--keys", "30", "--series", "2", "--orderings", "none,key"]
    done = run_bench(tmp_path, "bench/batch.py", *argv)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert sum(" run " in line for line in lines) == 4  # two runs of each ordering, each printed
    doc = json.loads((tmp_path / "batch.json").read_text())
    assert doc["command"] == (
        "python3 bench/batch.py --records 6000 --partitions 3 --keys 30 --series 2 --orderings none,key"
    )
    assert [row[0] for row in doc["rows"]] == ["`none`", "`key`"]
    for row in doc["rows"]:
        ratios = row[3].split("(", 1)[1].rstrip(")").split(", ")
        assert len(ratios) == 2 and all(float(r) > 0 for r in ratios), row
        assert row[4].startswith(("≥ 1.0× in every run: ", "≥ 0.9× in every run: ")), row


def test_series_refuses_an_unknown_ordering_before_running_anything(tmp_path: Path) -> None:
    done = run_bench(tmp_path, "bench/batch.py", "--series", "1", "--orderings", "key,sorted", timeout=60)
    assert done.returncode != 0 and "'sorted' is not one of key, partition, none" in done.stderr
    assert not list(tmp_path.iterdir())
