"""What a ``ferry`` command loads before it runs: not httpx's own command line (click, rich,
pygments) and not the filter grammar (lark), which a client command never needs; each cost a
tenth of a second of every command on the test machine."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("click", "rich", "pygments", "lark")


def test_a_client_command_loads_no_heavy_module() -> None:
    probe = (
        "import sys; import ferry.cli, ferry.client.commands, ferry.client.plan; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"loaded by a client command: {done.stdout.strip()}"


def test_httpx_still_works_without_its_command_line() -> None:
    probe = "import ferry.client.api, httpx; print(httpx.Client().__class__.__name__)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "Client", done.stderr
