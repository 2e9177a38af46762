"""Fault scenario for adaptive concurrency (docs/delivery.md, "Adaptive concurrency"): under a
steady backlog, the endpoint's capacity collapses from 8 concurrent requests to 1 for 20 s, then
comes back.

The endpoint is bench/_capacity_endpoint.py in its own process: it serves C requests at once for
20 ms each, queues 128 more and answers 503 beyond; it records, per request, when it arrived and
was answered, its answer, whether the worker had already given up on it (a push timeout of
500 ms), and the record's ``ce-id``. The worker pushes with ``ordering: none`` and an adaptive
limit of at most 64, retrying 503s and timeouts without end.

Judged from the endpoint's own rows:

- lost: a record never processed;
- duplicates: a record processed twice (only a push the worker timed out and sent again can be);
- recovery: after capacity returns, a whole second runs at ≥ 80 % of the rate before the collapse
  (the median second of its last five) within :data:`RECOVERY_S`;
- during the collapse the endpoint is not flooded: no 503 after the first second of it.
"""

from __future__ import annotations

import json
import secrets
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ferry.devstack import embedded
from tests.support.kafka import create_topic, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

ENDPOINT = Path(__file__).resolve().parents[2] / "bench" / "_capacity_endpoint.py"
SERVICE_S = 0.02
PHASES = [(8, 10.0), (1, 20.0), (8, 20.0)]  # (concurrent requests served, seconds)
N = 7_000  # ~3,800 before the collapse, ~1,000 during it, the rest after: bounded by count and time
RECOVERY_S = 10
"""Within how many seconds of capacity returning recovery must show. It came within 2 s alone
(docs/RELIABILITY.md); with another test file's load on the same 2 cores the limit grew back more
slowly (67, 93, 116, 235, 253 records/s against 327 before, in one full run). The 5 s goal for
following a capacity change is bench/adaptive.py's, measured there."""


def call(url: str, doc: dict[str, Any] | None = None) -> Any:
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def test_capacity_collapses_to_one_for_20_s(tmp_path: Path, kafka_bootstrap: str) -> None:
    topic = f"collapse-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 4)
    produce(kafka_bootstrap, topic, ((None, f"v{i}".encode(), i % 4) for i in range(N)))
    port = embedded.free_port()
    argv = [sys.executable, str(ENDPOINT), str(port), "--service-ms", str(SERVICE_S * 1000), "--queue", "128"]
    endpoint = embedded.ServiceProcess("capacity-endpoint", argv, port, tmp_path / "endpoint.log")
    endpoint.start().wait_ready(30)
    url = f"http://127.0.0.1:{port}"
    sub = {
        "name": "collapse",
        "topics": [topic],
        "endpoint": {"url": f"{url}/hook", "timeout_ms": 500},
        "ordering": "none",
        "max_in_flight": 16,
        "retry": {"max_attempts": 1000, "initial_backoff_ms": 20, "max_backoff_ms": 200},
        "concurrency": {"mode": "adaptive", "min": 1, "max": 64},
    }
    try:
        call(f"{url}/start", {"phases": [list(p) for p in PHASES]})
        worker = static_worker(tmp_path, "w-collapse", kafka_bootstrap, f"__offsets-{topic}", [sub]).start()
        try:
            worker.wait_ready(30)

            def processed() -> int:
                return len({r[4] for r in call(f"{url}/figures")["rows"] if r[2] == 200})

            until(lambda: processed() >= N, timeout_s=120, what=f"all {N} records processed by the endpoint")
        finally:
            worker.stop()
        rows = call(f"{url}/figures")["rows"]
    finally:
        endpoint.stop()

    done = Counter(r[4] for r in rows if r[2] == 200)
    expected = {f"{topic}/{i % 4}/{i // 4}" for i in range(N)}
    assert expected - set(done) == set(), "lost"
    assert {cid: n for cid, n in done.items() if n > 1} == {}, "duplicates"

    collapse_start, collapse_end = PHASES[0][1], PHASES[0][1] + PHASES[1][1]
    flooded = [r for r in rows if r[2] == 503 and collapse_start + 1 <= r[0] < collapse_end]
    assert flooded == [], f"{len(flooded)} requests refused during the collapse, after its first second"

    answered: dict[str, float] = {}
    for r in rows:
        if r[2] == 200:
            answered[r[4]] = min(r[1], answered.get(r[4], r[1]))
    first_done = sorted(answered.values())

    def rate_in_second(start: float) -> int:
        return sum(1 for t in first_done if start <= t < start + 1)

    # What the worker and the endpoint reach together on this machine at the same capacity, once
    # the limit has adapted (the last 5 s before the collapse), is what recovery returns to.
    before = sorted(rate_in_second(collapse_start - s) for s in range(1, 6))[2]
    after = [rate_in_second(collapse_end + s) for s in range(RECOVERY_S)]
    recovered = next((s for s, n in enumerate(after) if n >= 0.8 * before), None)
    assert recovered is not None, (
        f"no second at 80 % of the rate before the collapse ({before}/s) within {RECOVERY_S} s: {after}"
    )
    print(f"collapse: {len(rows):,} requests, {before}/s before, {after} after; no loss, no duplicate")
