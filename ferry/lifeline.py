"""A service started by ``ferry dev`` ends when ``ferry dev`` is gone, in bounded time.

Use case: ``ferry dev`` starts its services with ``FERRY_PARENT_PID`` set to its own pid (and, on
Linux, asks the kernel to send them SIGTERM when it dies). :func:`hold` watches for the parent to
go — even by kill -9, even if the kernel's signal was missed — and then stops the service the
usual way (SIGTERM, a graceful stop); if the service has not exited :data:`GRACE_S` later (a stop
waiting on an unreachable ZooKeeper or broker, say), it writes every thread's stack to its log
and exits at once. A service started by anything else (Kubernetes, systemd) has no such variable
and is not watched: its supervisor owns its lifetime.

States: watching (parent alive) → stopping (SIGTERM sent) → gone (exited, or ended after the grace).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time

from ferry.digits import ascii_digits

ENV = "FERRY_PARENT_PID"
GRACE_S = 20.0
"""How long a service whose parent is gone may take to stop before it ends at once."""
POLL_S = 0.5


def hold(environ: dict[str, str] | None = None) -> threading.Thread | None:
    """Watch the parent named by ``FERRY_PARENT_PID`` (none: do nothing) from a daemon thread."""
    raw = (os.environ if environ is None else environ).get(ENV, "")
    if not ascii_digits(raw):
        return None
    parent = int(raw)
    thread = threading.Thread(target=_watch, args=(parent,), name="ferry-lifeline", daemon=True)
    thread.start()
    return thread


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(POLL_S)
    _line("lifeline.parent_gone", parent=parent, grace_s=GRACE_S)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    _line("lifeline.stop_overdue", parent=parent, grace_s=GRACE_S, hint="stacks follow; exiting now")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


def _line(event: str, **fields: object) -> None:
    """One structured line on stderr (the service's log), written without the logging machinery,
    which a stuck service may hold."""
    doc = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": "warning", "event": event, **fields}
    sys.stderr.write(json.dumps(doc) + "\n")
    sys.stderr.flush()
