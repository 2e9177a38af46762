"""The C speedups in tests: a test of the C path fails when its module was not built.

CI has a compiler, so a missing module is a broken build, which a skip would hide. Only
``FERRY_NATIVE=0`` (the C path turned off on purpose) skips these tests.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from ferry import native


def required(module_name: str) -> ModuleType:
    """The C module ``module_name`` (e.g. ``ferry.worker._encode``); skips under ``FERRY_NATIVE=0``,
    fails when it was not built."""
    if not native.enabled():
        pytest.skip("FERRY_NATIVE=0: the C speedups are off")
    module = native.load(module_name)
    if module is None:
        pytest.fail(
            f"{module_name} is not built: python3 setup.py build_ext --inplace (FERRY_NATIVE=0 skips the C tests)"
        )
    return module
