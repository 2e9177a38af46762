"""A service the tests need is missing from this machine: say so once, clearly.

In a plain run the tests that need it are skipped with one reason (``pytest -rs`` lists it once,
with their count); in CI (``CI=true``, which ``.ci/run`` sets) the whole run stops at the first
test that needs it, with that reason, instead of failing test after test.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(service: str, why: str, fix: str) -> NoReturn:
    reason = f"{service} is not available: {why} ({fix})"
    if in_ci():
        pytest.exit(f"CI needs every service; {reason}", returncode=1)
    pytest.skip(reason)
