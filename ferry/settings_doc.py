"""The settings table of ``docs/operations.md``, rendered from the settings tree itself.

Use case: a setting is documented exactly once, by the docstring under its field in
:mod:`ferry.config`; this module turns those docstrings, defaults and secrecy flags into the
markdown table between ``<!-- settings -->`` and ``<!-- /settings -->`` in the operations page,
so the page cannot drift from the code. A unit test checks that the page equals the rendering.

    python3 -m ferry.settings_doc            # rewrite the table in docs/operations.md
    python3 -m ferry.settings_doc --check    # exit 1 if the page is out of date

Pure apart from reading ``ferry/config.py``'s source (for the docstrings, which Python does not
keep on fields) and, from the command line, the page.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import re
import sys
from pathlib import Path
from typing import Any

from ferry import config

BEGIN, END = "<!-- settings -->", "<!-- /settings -->"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "operations.md"
_MIB = 1024 * 1024


def field_docs() -> dict[tuple[str, str], str]:
    """``(class name, field name) -> docstring`` for every documented field in ferry/config.py."""
    tree = ast.parse(inspect.getsource(config))
    out: dict[tuple[str, str], str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for stmt, after in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                out[(node.name, stmt.target.id)] = inspect.cleandoc(after.value.value)
    return out


def default_text(env: str, f: dataclasses.Field[Any]) -> str:
    """A field's default as the table shows it."""
    value = f.default
    if value is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    if value in ("", ()):
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and env.endswith("_BYTES") and value % _MIB == 0:
        return f"{value // _MIB} MiB"
    if isinstance(value, dict):
        return "`{}`"
    return f"`{value}`"


def markdown(doc: str) -> str:
    """A reST-flavoured docstring as one markdown table cell."""
    text = " ".join(doc.split())
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    text = re.sub(r"\bdocs/([\w.-]+\.md)\b", r"[\1](\1)", text)
    return text.replace("|", "\\|")


def render() -> str:
    """The table, header included, one row per setting in the tree's order."""
    docs = field_docs()
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for s in config.SETTINGS:
        f = s.declared
        assert f is not None  # every setting of SETTINGS comes from a field
        doc = docs.get((s.owner, f.name))
        if doc is None:
            raise LookupError(f"{s.env}: the field {s.owner}.{f.name} in ferry/config.py needs a docstring")
        meaning = markdown(doc) + (" *Secret: masked wherever settings are shown.*" if s.secret else "")
        rows.append(f"| `{s.env}` | {default_text(s.env, f)} | {meaning} |")
    return "\n".join(rows) + "\n"


def splice(page: str, table: str) -> str:
    """``page`` with the text between the markers replaced by ``table``."""
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise LookupError(f"the page has no {BEGIN} ... {END} markers around its settings table")
    return page[: start + len(BEGIN)] + "\n" + table + page[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m ferry.settings_doc", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    page = args.page.read_text()
    wanted = splice(page, render())
    if wanted == page:
        return 0
    if args.check:
        print(f"{args.page}: the settings table is out of date; run python3 -m ferry.settings_doc", file=sys.stderr)
        return 1
    args.page.write_text(wanted)
    print(f"{args.page}: settings table rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
