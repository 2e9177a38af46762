"""Render docs/BENCHMARKS.md's tables from bench/results/*.json (see bench/_results.py).

python3 -m bench.render           # rewrite the tables in place
python3 -m bench.render --check   # exit 1 when the page is not what the results render
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from bench import _results

PAGE = Path(__file__).resolve().parents[1] / "docs" / "BENCHMARKS.md"
BLOCK = re.compile(r"(<!-- table:([\w-]+) -->\n)(.*?)(<!-- /table -->)", re.DOTALL)


def table(name: str) -> str:
    r = _results.load(name)
    cols = r["columns"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in r["rows"]]
    foot = f"`{r['command']}` — {r['date']}"
    if r.get("note"):
        foot += f". {r['note']}"
    return "\n".join(lines) + "\n\n" + foot + "\n"


def render(page: str) -> str:
    """The page with every table block replaced by its result's table."""
    return BLOCK.sub(lambda m: m.group(1) + table(m.group(2)) + m.group(4), page)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    text = PAGE.read_text()
    fresh = render(text)
    if a.check:
        if fresh != text:
            print("docs/BENCHMARKS.md differs from bench/results: run python3 -m bench.render", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
