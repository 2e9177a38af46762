"""Import layering: the contracts in ``.importlinter`` hold for the source tree — the command line on
top, then ``ferry dev``, then the services (each independent of the others), then the shared modules;
no import cycle inside any package. CI runs ``lint-imports`` too; this test makes the fast tier catch
a broken contract and shows import-linter's own report of it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    exe = shutil.which("lint-imports")
    assert exe, "import-linter is not installed: pip install -e '.[dev]'"
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


def test_installed_layout_names_only_the_ferry_package() -> None:
    """Every service folder is reachable as ``ferry.<folder>`` (a link in ``ferry/``), so nothing
    imports a bare ``worker`` or ``portal`` that would collide with other distributions."""
    for folder in ("worker", "coordinator", "portal", "gateway", "replay", "migrations"):
        link = ROOT / "ferry" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), link


def test_wheel_installs_only_the_ferry_package(tmp_path: Path) -> None:
    """``pip install ferry`` puts one top-level package into site-packages: ``ferry`` (its services
    are ``ferry.worker``, ``ferry.portal``, …), never a bare ``worker`` or ``migrations``."""
    import sys
    import zipfile

    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    run = subprocess.run(
        [*pip_wheel, "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (wheel,) = tmp_path.glob("ferry-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"ferry"}, sorted(top)
    for module in ("worker/engine.py", "portal/static/index.html", "migrations/alembic.ini", "gateway/__init__.py"):
        assert f"ferry/{module}" in names, module


def test_the_code_expects_the_newest_migration() -> None:
    from ferry import db

    newest = max(p.name.split("_", 1)[0] for p in (ROOT / "migrations" / "versions").glob("[0-9]*_*.py"))
    assert newest == db.SCHEMA_REVISION, "bump ferry.db.SCHEMA_REVISION with the new migration"
