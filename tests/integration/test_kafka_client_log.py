"""A real worker whose broker dies: librdkafka's connection failures reach the worker's log as
structured ``kafka.client_log`` events, never in librdkafka's own ``%3|...|FAIL|...`` format, and
the reconnect attempts (about 20 a second per client) are collapsed to one line per 10 s per
repeat key. The broker is the test's own (it is killed), never the session's shared one."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ferry.devstack import embedded
from ferry.kafka_log import REPEAT_INTERVAL_S, repeat_key
from tests.support.wait import until
from tests.support.worker import WorkerProcess, delivering_worker

pytestmark = pytest.mark.integration
RAW_LINE = re.compile(r"^%\d\|", re.M)


def client_logs(w: WorkerProcess) -> list[dict[str, Any]]:
    out = []
    for line in w.log_path.read_text(errors="replace").splitlines():
        if '"kafka.client_log"' in line:
            out.append(json.loads(line))
    return out


def test_a_dead_broker_is_logged_structured_and_collapsed(tmp_path: Path, own_broker: embedded.ServiceProcess) -> None:
    bootstrap = f"127.0.0.1:{own_broker.port}"
    env = {"FERRY_LOG_FORMAT": "json", "FERRY_DRAIN_TIMEOUT_MS": "1000"}
    with delivering_worker(tmp_path, "logs", bootstrap, env) as (w, _, _):
        own_broker.kill()
        killed = time.monotonic()
        until(lambda: not embedded.port_open(own_broker.port), timeout_s=10, what="the broker gone")

        def refused() -> list[dict[str, Any]]:
            return [e for e in client_logs(w) if e["facility"] == "FAIL" and "Connection refused" in e["message"]]

        first = until(refused, timeout_s=20, what="a structured FAIL event for the refused connection")[0]
        # The reconnect attempts go on; the next line of a repeat key comes only after the interval.
        collapsed = until(
            lambda: [e for e in refused() if e.get("suppressed", 0) > 0],
            timeout_s=REPEAT_INTERVAL_S + 20,
            what="a FAIL event counting the repeats it stands for",
        )
        assert w.alive(), w.log_tail()
    elapsed = time.monotonic() - killed  # the log below runs until the worker stopped

    log = w.log_path.read_text(errors="replace")
    assert not RAW_LINE.search(log), "librdkafka wrote its own lines:\n" + "\n".join(RAW_LINE.findall(log)[:5])
    assert "|FAIL|" not in log
    assert first["level"] == "error" and first["client"].startswith("rdkafka#") and first["role"]
    assert first["thread"]
    assert collapsed[0]["suppressed"] >= 10, collapsed[0]  # ~20 attempts a second were behind it

    # Bounded: per repeat key, one line per interval at most (plus the first), however many attempts.
    events = [e for e in client_logs(w) if e["facility"] == "FAIL"]
    per_key = Counter(repeat_key(e["client"], e["facility"], e["message"]) for e in events)
    bound = 2 + elapsed / REPEAT_INTERVAL_S
    assert max(per_key.values()) <= bound, per_key
    suppressed = sum(e.get("suppressed", 0) for e in events)
    print(
        f"{len(events)} FAIL lines from {len({e['role'] for e in events})} roles stood for"
        f" {len(events) + suppressed} in {elapsed:.1f} s; keys: {dict(per_key)}"
    )
    assert suppressed > len(events)
