"""Which Java the embedded ZooKeeper and Spark get: the machine's own first, the bundled one else."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferry import java


def _runtime(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    exe = root / "bin" / "java"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return root


@pytest.mark.parametrize(
    ("java_home", "on_path", "bundled", "expected"),
    [
        ("home", True, True, "home"),
        ("", True, True, "path"),
        ("", False, True, "bundled"),
        ("missing", False, True, "bundled"),
        ("", False, False, None),
    ],
)
def test_the_machines_java_wins_over_the_bundled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, java_home: str, on_path: bool, bundled: bool, expected: str | None
) -> None:
    runtimes = {name: _runtime(tmp_path / name) for name in ("home", "path", "bundled")}
    monkeypatch.setenv("JAVA_HOME", str(runtimes["home"]) if java_home == "home" else str(tmp_path / java_home))
    if not java_home:
        monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(runtimes["path"] / "bin") if on_path else str(tmp_path / "empty"))
    monkeypatch.setattr(java, "bundled_java_home", lambda: runtimes["bundled"] if bundled else None)
    if expected is None:
        with pytest.raises(java.JavaNotFound, match="pip install 'ferry\\[embedded\\]'"):
            java.executable()
        return
    assert java.executable() == str(runtimes[expected] / "bin" / "java")
    if expected == "bundled":
        with pytest.raises(java.JavaNotFound, match="ferry replay needs a Java 17 or 21 runtime"):
            java.require_system_java("ferry replay")
    else:
        assert java.require_system_java("ferry replay") == str(runtimes[expected] / "bin" / "java")
