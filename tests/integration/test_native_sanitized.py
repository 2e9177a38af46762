"""The C twins under AddressSanitizer and UBSan: built once with the sanitizers into a copy of the
checkout, they run their differential tests (tests/unit/test_native_*.py, test_gateway_acks.py,
test_gateway_plain.py, test_gateway_body.py) and then replay a corpus that coverage-guided fuzzing (atheris,
tests/support/fuzz_native.py) found against the Python references. A memory error, undefined
behaviour or a difference from the reference fails the test with the sanitizer's report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.needs import missing

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g"
FUZZ_RUNS = "50000"  # per target: bounded in count (seconds on the test machine)


def _runtime(name: str) -> str:
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(found):
        missing("gcc's sanitizer runtimes", f"{name} not found", "apt-get install gcc")
    return found


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)


def test_the_c_twins_under_asan_and_ubsan(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        missing("gcc", "no C compiler on PATH", "apt-get install gcc")
    pytest.importorskip("atheris", reason="the dev extra brings atheris")
    src = tmp_path / "src"
    shutil.copytree(
        ROOT,
        src,
        symlinks=True,  # ferry/worker -> ../worker, as in the checkout
        ignore=shutil.ignore_patterns(".git", "build", "*.so", "__pycache__", "*.egg-info", "docs", "helm", ".*cache"),
    )
    env = {**os.environ, "CFLAGS": FLAGS, "LDFLAGS": "-fsanitize=address,undefined", "PYTHONPATH": str(src)}
    built = _run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], src, env, 300)
    assert built.returncode == 0, built.stderr[-3000:]
    # The extensions are optional: a failed build must not pass unseen.
    for folder, name in (("worker", "_records"), ("worker", "_encode"), ("gateway", "_acks"), ("gateway", "_plain")):
        so = next((src / folder).glob(f"{name}.*.so"), None)
        assert so is not None, f"{name} was not built:\n{built.stderr[-3000:]}"
        assert "__asan" in _run(["nm", "-D", str(so)], src, env, 30).stdout, f"{so} is not instrumented"

    # The corpus: coverage-guided fuzzing of each twin against its reference, without sanitizers.
    plain = {k: v for k, v in env.items() if k not in ("CFLAGS", "LDFLAGS")}
    plain["PYTHONPATH"] = str(ROOT)
    corpora = {}
    for target in ("encode", "records", "body"):
        corpus = tmp_path / f"corpus-{target}"
        corpus.mkdir()
        fuzz = [sys.executable, "-m", "tests.support.fuzz_native", target, str(corpus)]
        found = _run([*fuzz, f"-runs={FUZZ_RUNS}", "-max_len=2048", "-seed=1"], ROOT, plain, 300)
        assert found.returncode == 0, found.stderr[-3000:]
        corpora[target] = corpus

    sanitized = {
        **env,
        "LD_PRELOAD": f"{_runtime('libasan.so')}:{_runtime('libubsan.so')}",
        "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1",  # CPython's own allocations are not leaks
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    tests += [
        "tests/unit/test_native_encode.py",
        "tests/unit/test_native_records.py",
        "tests/unit/test_gateway_acks.py",
        "tests/unit/test_gateway_plain.py",
        "tests/unit/test_gateway_records.py",
        "tests/unit/test_gateway_body.py",
    ]
    ran = _run(tests, src, sanitized, 600)
    assert ran.returncode == 0 and " passed" in ran.stdout, ran.stdout[-3000:] + ran.stderr[-3000:]
    for target, corpus in corpora.items():
        replayed = _run(
            [sys.executable, "-m", "tests.support.fuzz_native", "replay", target, str(corpus)], src, sanitized, 300
        )
        assert replayed.returncode == 0, replayed.stdout[-2000:] + replayed.stderr[-3000:]
        assert "no difference" in replayed.stdout
    assert "runtime error:" not in ran.stderr and "AddressSanitizer" not in ran.stderr
