"""Import layering, checked on the source: the services share only the ``ferry`` package.

``portal`` never imports ``worker`` (nor the other way round), the coordinator imports neither,
and the shared package imports no service, except where the command line starts one (``ferry.cli``
and ``ferry dev`` import a service's entry point when it is asked for)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("worker", "coordinator", "portal", "replay", "migrations")
ALLOWED = {
    "worker": {"ferry"},
    "coordinator": {"ferry"},
    "portal": {"ferry"},
    "replay": {"ferry"},
    "migrations": {"ferry"},
    "ferry": set(),
}
LAUNCHERS = {"ferry/cli.py": set(SERVICES), "ferry/dev.py": {"migrations"}}


def first_party_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out & {*SERVICES, "ferry"}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed = {package} | ALLOWED[package] | LAUNCHERS.get(rel, set())
        for name in sorted(first_party_imports(path) - allowed):
            bad.append(f"{rel} imports {name}")
    assert not bad, "layering broken (share it through the ferry package instead):\n" + "\n".join(bad)
