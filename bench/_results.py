"""Benchmark results as files, so docs/BENCHMARKS.md is rendered from them and cannot drift.

A script calls :func:`save` with the table it printed; ``python3 -m bench.render`` puts every
result's table into docs/BENCHMARKS.md between ``<!-- table:NAME -->`` and ``<!-- /table -->``
(tests/unit/test_benchmarks_doc.py fails when the page and the results differ).

A result file, ``bench/results/NAME.json``: ``command`` (what reproduces it), ``date``,
``columns`` and ``rows`` (cells as printed), and an optional one-line ``note``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
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


def command_line(script: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The command that reproduces a run: ``script``, the switches given, then the options given
    other values than their defaults, in the parser's order (``--case A --case B`` for a list)."""
    defaults = vars(parser.parse_args([]))
    given = {k: v for k, v in vars(args).items() if v != defaults[k]}
    parts = [script] + [f"--{k.replace('_', '-')}" for k, v in given.items() if v is True]
    for k, v in given.items():
        for x in [] if v is True else v if isinstance(v, list) else [v]:
            parts.append(f"--{k.replace('_', '-')} {_quoted(f'{x:g}' if isinstance(x, float) else str(x))}")
    return " ".join(parts)


def _quoted(arg: str) -> str:
    """``arg`` for a shell: as it is when nothing in it needs quoting, else in double quotes."""
    if re.fullmatch(r"[\w@%+=:,./-]+", arg):
        return arg
    return '"' + re.sub(r'(["\\$`])', r"\\\1", arg) + '"'


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return doc


def names() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("*.json"))
