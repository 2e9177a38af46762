"""Turn the figures the chaos suite wrote (``FERRY_CHAOS_REPORT=path``, one JSON object per scenario
and run) into the Markdown table of docs/RELIABILITY.md:

    FERRY_CHAOS_REPORT=/tmp/chaos.jsonl python3 -m pytest -q tests/chaos
    python3 -m tests.chaos.report /tmp/chaos.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from typing import Any

COLUMNS = [
    ("records", "records"),
    ("faults", "faults"),
    ("lost", "lost"),
    ("duplicates", "duplicates"),
    ("unexplained_duplicates", "unexplained dup."),
    ("order_violations", "order viol."),
    ("fencing_violations", "fencing viol."),
    ("max_stall_s", "max stall (s)"),
]


def table(rows: list[dict[str, Any]]) -> str:
    """One line per scenario; a scenario run several times shows each run's figure, separated by ' / '."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        runs[r["scenario"]].append(r)
    out = [
        "| scenario | " + " | ".join(title for _, title in COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for name, rs in runs.items():
        cells = [" / ".join(_cell(r.get(key)) for r in rs) for key, _ in COLUMNS]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def _cell(value: Any) -> str:
    return "n/a" if value is None else str(value)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m tests.chaos.report FIGURES.jsonl", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
