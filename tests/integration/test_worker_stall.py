"""A partition held by one record: the watermark stall in /stats and /metrics, and back to 0."""

from __future__ import annotations

import re
import secrets
import threading
import time
from pathlib import Path

import pytest

from tests.support.endpoint import EndpointRecorder, Received, Reply
from tests.support.kafka import create_topic, produce
from tests.support.wait import until
from tests.support.worker import WorkerProcess, static_worker

pytestmark = pytest.mark.integration


def stalled_metric(w: WorkerProcess, topic: str) -> float | None:
    pattern = rf'^ferry_watermark_stalled_seconds{{[^}}]*topic="{re.escape(topic)}"[^}}]*}} (\S+)$'
    m = re.search(pattern, w.metrics(), re.MULTILINE)
    return float(m.group(1)) if m else None


def test_a_record_the_endpoint_keeps_failing_shows_as_a_stall_until_it_settles(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic = f"held-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    healed = threading.Event()

    def script(r: Received) -> Reply:
        return Reply(500) if r.key == "bad" and not healed.is_set() else Reply(200)

    endpoint.script = script
    produce(kafka_bootstrap, topic, [(b"bad", b"poison", 0)] + [(f"k{i}".encode(), b"ok", 0) for i in range(30)])
    sub = {
        "name": "held",
        "topics": [topic],
        "endpoint": {"url": endpoint.url},
        "retry": {"max_attempts": 1000, "initial_backoff_ms": 50, "max_backoff_ms": 200},
    }
    w = static_worker(tmp_path, "wh", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        endpoint.wait_for(
            lambda rs: len({r.key for r in rs if r.status == 200}) >= 30, timeout_s=30, what="the other keys"
        )

        def held() -> dict | None:  # type: ignore[type-arg]
            st = w.stats()[0]
            return st if st["stalled_s"] >= 1.5 else None

        st = until(held, timeout_s=20, what="the stall to pass 1.5 s")
        # The record holding the partition is offset 0; everything above it is acknowledged.
        assert st["committed"] == 0 and st["acked_ranges"] == 1 and st["in_flight"] == 1
        assert (stalled_metric(w, topic) or 0.0) >= 1.0
        until(lambda: w.stats()[0]["stalled_s"] >= st["stalled_s"] + 0.5, timeout_s=10, what="the stall to grow")

        healed.set()
        until(
            lambda: (s := w.stats()[0])["committed"] == 31 and s["stalled_s"] == 0.0,
            timeout_s=20,
            what="the watermark to move to the end and the stall back to 0",
        )
        until(lambda: stalled_metric(w, topic) == 0.0, timeout_s=10, what="the gauge back to 0")
        assert w.stats()[0]["dead_lettered"] == 0
    finally:
        w.stop()


def test_a_busy_partition_whose_watermark_moves_shows_no_stall(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    """Slow answers keep records in flight the whole time, yet each settles: no stall."""
    topic = f"busy-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    endpoint.script = lambda r: Reply(200, delay_s=0.05)
    n = 800
    produce(kafka_bootstrap, topic, ((f"k{i % 50}".encode(), b"ok", 0) for i in range(n)))
    sub = {"name": "busy", "topics": [topic], "endpoint": {"url": endpoint.url}, "max_in_flight": 8}
    w = static_worker(tmp_path, "wb", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub]).start()
    try:
        w.wait_ready(30)
        worst = 0.0

        def done() -> bool:
            nonlocal worst
            st = w.stats()
            if not st:
                return False
            worst = max(worst, st[0]["stalled_s"])
            return bool(st[0]["committed"] == n)

        until(done, timeout_s=60, what="every record acknowledged")
        # 800 records at 8 in flight and 50 ms each take ~5 s; the watermark moves all along, so
        # the figure stays at a few offset flushes (200 ms each) at most, even on a loaded machine.
        assert worst <= 2.0, f"a moving watermark was reported held for {worst} s"
        # Idle at the end of the log: nothing is held, however long it stays so (a few flushes).
        idle_until = time.monotonic() + 1.5
        while time.monotonic() < idle_until:
            assert w.stats()[0]["stalled_s"] == 0.0, "an idle partition was reported held"
            time.sleep(0.1)
    finally:
        w.stop()
