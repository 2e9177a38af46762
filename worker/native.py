"""The worker's optional C speedups (:mod:`ferry.native` says how they are switched off).

Use case: a worker pushing in batch mode is bound by the GIL (bench/batch.py profile: held 96 %
of the time), and two per-record loops take ~40 % of it: building records from fetched messages
(:mod:`worker.fetch`) and encoding CloudEvents (:mod:`worker.batch`). Each has a pure-Python
implementation, which is the reference, and a C twin built by setup.py where a compiler exists;
tests run both on the same input and require the same result.
"""

from __future__ import annotations

from types import ModuleType

from ferry import native

# The C modules setup.py builds (each optional).
MODULES: tuple[str, ...] = ("_records", "_encode")


def load(name: str) -> ModuleType | None:
    """The C module ``worker.<name>``, or None when it is turned off or was not built."""
    return native.load(f"ferry.worker.{name}")


def loaded() -> dict[str, bool]:
    """Which speedups this process runs, for the start log line."""
    return {name: load(name) is not None for name in MODULES}
