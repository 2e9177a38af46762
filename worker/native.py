"""Optional C speedups, and the switch that turns them off.

Use case: a worker pushing in batch mode is bound by the GIL (bench/batch.py profile: held 96 %
of the time), and two per-record loops take ~40 % of it: building records from fetched messages
(:mod:`worker.fetch`) and encoding CloudEvents (:mod:`worker.batch`). Each has a pure-Python
implementation, which is the reference, and a C twin built by setup.py where a compiler exists;
tests run both on the same input and require the same result.

``FERRY_NATIVE=0`` in the environment makes :func:`load` return None, so the pure-Python path
runs (to compare the two, or to rule the C path out when chasing a problem).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ferry import config

# The C modules setup.py builds (each optional).
MODULES: tuple[str, ...] = ("_records", "_encode")


def enabled() -> bool:
    """``FERRY_NATIVE`` (default true)."""
    return bool(config.value("FERRY_NATIVE"))


def load(name: str) -> ModuleType | None:
    """The C module ``worker.<name>``, or None when it is turned off or was not built."""
    if not enabled():
        return None
    try:
        return importlib.import_module(f"ferry.worker.{name}")
    except ImportError:
        return None


def loaded() -> dict[str, bool]:
    """Which speedups this process runs, for the start log line."""
    return {name: load(name) is not None for name in MODULES}
