"""Optional C speedups, and the switch that turns them off.

Use case: a few per-record hot paths (the worker's record building and CloudEvents encoding, the
gateway's acknowledgements) have a pure-Python implementation, which is the reference, and a C
twin built by setup.py where a compiler exists; tests run both on the same input and require the
same result. ``FERRY_NATIVE=0`` in the environment makes :func:`load` return None, so the
pure-Python path runs (to compare the two, or to rule the C path out when chasing a problem).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ferry import config


def enabled() -> bool:
    """``FERRY_NATIVE`` (default true)."""
    return bool(config.value("FERRY_NATIVE"))


def load(module: str) -> ModuleType | None:
    """The C module ``module`` (a dotted name), or None when it is turned off or was not built."""
    if not enabled():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
