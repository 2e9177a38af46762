"""The broker-backed benches end to end at a small size: each starts its own broker and services,
runs every row, and saves the table docs/BENCHMARKS.md renders. A bench that breaks after a
refactor is found here rather than by the next person measuring. Figures are not judged here
(speed goals live in bench/), only what must hold at any speed: no failed request, no duplicate,
every row present."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.benches import ROOT, run_bench
from tests.support.needs import missing

pytestmark = pytest.mark.integration


def bench(results: Path, *argv: str, timeout: float = 300) -> list[str]:
    """Run a bench with its table saved under ``results``; its output lines (it must exit 0)."""
    done = run_bench(results, *argv, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    return done.stdout.splitlines()


def saved(results: Path, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((results / f"{name}.json").read_text())
    return doc


def test_adaptive_bench_runs_every_window_and_measures_the_unloaded_latency(tmp_path: Path) -> None:
    lines = bench(tmp_path, "bench/adaptive.py", "--phases", "8:6,4:6", "--fixed", "4", "--queue", "16")
    unloaded = next(line for line in lines if line.startswith("the endpoint's unloaded latency"))
    # a request is answered no sooner than its 20 ms of service
    assert 20.0 <= float(unloaded.split(": ")[1].split(" ms")[0]) < 200.0, unloaded
    verdicts = [line for line in lines if line.startswith("C=")]
    assert [v.split(":")[0] for v in verdicts] == ["C=8", "C=4"]
    assert all("× the unloaded latency" in v for v in verdicts), verdicts
    doc = saved(tmp_path, "adaptive")
    assert doc["command"] == "python3 bench/adaptive.py --phases 8:6,4:6 --queue 16 --fixed 4"
    assert [row[0] for row in doc["rows"]] == ["fixed 4", "adaptive"]
    for row in doc["rows"]:  # neither a window of 4 nor adaptive overloads this endpoint
        assert row[-2:] == ["0", "0"], row  # 503s + timeouts, duplicates


def test_adaptive_bench_runs_a_cluster_of_workers(tmp_path: Path) -> None:
    lines = bench(tmp_path, "bench/adaptive.py", "--phases", "4:6", "--fixed", "4", "--workers", "2", "--coordinated")
    assert [line.split(":")[0] for line in lines if line.startswith("C=")] == ["C=4"]
    doc = saved(tmp_path, "adaptive_workers")
    assert doc["command"] == "python3 bench/adaptive.py --coordinated --phases 4:6 --fixed 4 --workers 2"
    assert [row[0] for row in doc["rows"]] == ["fixed 4", "adaptive"]
    for row in doc["rows"]:
        assert row[-1] == "0", row  # no duplicate


def test_phases_too_short_to_settle_are_refused(tmp_path: Path) -> None:
    done = run_bench(tmp_path, "bench/adaptive.py", "--phases", "8:3", timeout=60)
    assert done.returncode != 0 and "every phase must last more than 5 s" in done.stderr
    assert not list(tmp_path.iterdir())


def test_transactions_bench_commits_every_transaction(tmp_path: Path) -> None:
    lines = bench(tmp_path, "-m", "bench.transactions", "--seconds", "1", "--concurrency", "4")
    rows = [line.split() for line in lines if line.startswith(("produce ", "txn "))]
    assert [(r[0], r[1]) for r in rows] == [("produce", "1"), ("txn", "1"), ("produce", "10"), ("txn", "10")]
    for r in rows:
        assert float(r[3].replace(",", "")) > 0 and r[-1] == "0", r  # operations/s, errors
    shared = [line.rsplit("; ", 1)[1].split()[0] for line in lines if "per `committed` entry" in line]
    assert len(shared) == 2 and all(float(n) >= 1.0 for n in shared), shared  # read from the gateway's /metrics
    doc = saved(tmp_path, "transactions")
    assert doc["command"] == "python3 -m bench.transactions --seconds 1 --concurrency 4"
    assert [row[0] for row in doc["rows"]] == ["1", "10"]


def test_gateway_bench_answers_every_request(tmp_path: Path) -> None:
    if shutil.which("wrk") is None:
        missing("wrk", "bench.gateway loads the gateway with it", "apt-get install wrk")
    lines = bench(tmp_path, "-m", "bench.gateway", "--seconds", "1", "--connections", "2")
    head = lines.index(next(line for line in lines if line.startswith("server ")))
    rows = [line.split() for line in lines[head + 1 : head + 9]]
    assert [(r[0], r[1]) for r in rows] == [
        ("trivial", "1"),
        ("trivial", "100"),
        ("aiohttp", "1"),
        ("naive", "1"),
        ("naive", "100"),
        ("ferry", "1"),
        ("ferry", "100"),
        ("ferry+key", "1"),
    ]
    for r in rows:
        assert float(r[3].replace(",", "")) > 0 and r[-1] == "0", r  # requests/s, non-2xx answers
    doc = saved(tmp_path, "gateway")
    assert doc["command"] == "python3 -m bench.gateway --seconds 1 --connections 2"
    assert [row[0] for row in doc["rows"]] == ["1", "100"]


# The other broker-backed benches at a small size, in their parser's option order, so that the
# command they save is exactly the one that ran; ``True``: the table's row labels are fixed.
SMALL = {
    "delivery": (["bench/delivery.py", "--records", "5000", "--rss-records", "1200"], True),
    "latency": (["bench/latency.py", "--rates", "200", "--seconds", "2", "--backlog", "2000"], False),
    "memory": (
        ["bench/memory.py", "--topics", "2", "--partitions", "10", "--per-partition", "50", "--seconds", "5"],
        False,
    ),
    "restore": (
        ["bench/restore.py", "--history", "3000", "--keys", "300", "--handoffs", "2", "--between", "200"],
        True,
    ),
    "handoff": (["bench/handoff.py", "--partitions", "4", "--rate", "100", "--workers", "2"], True),
    "replay": (["bench/replay.py", "--records", "20000", "--keys", "200"], True),
    "dev_start": (["-m", "bench.dev_start", "--runs", "1"], True),
}
COLUMNS = {"dev_start": 2}
"""Tables whose column count follows the command: dev_start has the label's and one per run (the
page shows three runs, the smoke run makes one). The others have the page's columns."""


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bench_saves_the_table_the_page_shows(name: str, tmp_path: Path) -> None:
    """Each bench writes its BENCHMARKS table itself, in the shape the page shows, under the
    command that ran (the page's figures are reproducible by the command printed under them)."""
    argv, fixed_labels = SMALL[name]
    bench(tmp_path, *argv, timeout=400)
    doc, shown = saved(tmp_path, name), json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
    assert doc["command"] == "python3 " + " ".join(argv)
    assert len(doc["columns"]) == COLUMNS.get(name, len(shown["columns"])) and doc["rows"], doc
    if fixed_labels:
        assert [r[0] for r in doc["rows"]] == [r[0] for r in shown["rows"]], doc


def test_fetch_order_bench_accounts_for_every_partition(tmp_path: Path) -> None:
    lines = bench(tmp_path, "-m", "bench.fetch_order", "--records", "3000", "--partitions", "3", "--keys", "30")
    assert any(line.startswith("3,000 records in ") for line in lines), lines
    firsts = next(line for line in lines if line.startswith("first record")).split()[2:]
    lasts = next(line for line in lines if line.startswith("last record")).split()[2:]
    assert len(firsts) == len(lasts) == 3, lines
    assert all(float(f) <= float(t) for f, t in zip(firsts, lasts, strict=True)), lines
    assert not list(tmp_path.iterdir())  # a probe: nothing saved for docs/BENCHMARKS.md


def test_consume_cost_bench_measures_every_size(tmp_path: Path) -> None:
    lines = bench(tmp_path, "-m", "bench.consume_cost", "--records", "3000", "--rounds", "2", "--sizes", "10,1000")
    rows = {line.split()[0]: line.split() for line in lines if line.strip()[:1].isdigit() and "µs" not in line}
    assert set(rows) >= {"10", "1000"}, lines
    for row in (rows["10"], rows["1000"]):
        consume_us, build_us, total_us = map(float, row[1:4])
        assert consume_us > 0 and build_us > 0 and abs(consume_us + build_us - total_us) < 0.02, row
        assert len(row[4:]) == 2, row  # one total per round
    assert not list(tmp_path.iterdir())  # a probe: nothing saved for docs/BENCHMARKS.md
