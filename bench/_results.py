"""Benchmark results as files, so docs/BENCHMARKS.md is rendered from them and cannot drift.

A script calls :func:`save` with the table it printed; ``python3 -m bench.render`` puts every
result's table into docs/BENCHMARKS.md between ``<!-- table:NAME -->`` and ``<!-- /table -->``
(tests/unit/test_benchmarks_doc.py fails when the page and the results differ).

A result file, ``bench/results/NAME.json``: ``command`` (what reproduces it), ``date``,
``columns`` and ``rows`` (cells as printed), and an optional one-line ``note``.
"""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(os.environ.get("FERRY_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
"""Where results go; ``FERRY_BENCH_RESULTS`` elsewhere (the benches' smoke test writes to its own)."""


def save(name: str, command: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], note: str = "") -> Path:
    """Write one result (cells are turned into text as given); the path written."""
    RESULTS.mkdir(exist_ok=True)
    doc = {
        "command": command,
        "date": datetime.date.today().isoformat(),
        "columns": list(columns),
        "rows": [[str(c) for c in row] for row in rows],
        "note": note,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return path


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return doc


def names() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("*.json"))
