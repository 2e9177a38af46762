"""Trace context through a real worker with OpenTelemetry configured (``OTEL_TRACES_EXPORTER=console``):
the endpoint gets the push span's context as ``traceparent`` — the record's trace, a new parent —
and the record's own as ``ce-traceparent``; the span is exported (printed to the worker's log)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from tests.support.endpoint import EndpointRecorder
from tests.support.kafka import create_topic, produce
from tests.support.wait import until
from tests.support.worker import static_worker

pytestmark = pytest.mark.integration

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def test_a_traced_record_reaches_the_endpoint_under_the_push_span(
    tmp_path: Path, kafka_bootstrap: str, endpoint: EndpointRecorder
) -> None:
    topic = f"traced-{secrets.token_hex(3)}"
    create_topic(kafka_bootstrap, topic, 1)
    original = f"00-{TRACE}-{PARENT}-01"
    produce(kafka_bootstrap, topic, [(b"k", b"v", 0)], headers=[("traceparent", original.encode())])
    sub = {"name": "traced", "topics": [topic], "endpoint": {"url": endpoint.url}}
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "ferry-test-worker"}
    w = static_worker(tmp_path, "wt", kafka_bootstrap, f"__offsets-{secrets.token_hex(3)}", [sub], env=env).start()
    try:
        w.wait_ready(30)
        got = endpoint.wait_for(lambda rs: len(rs) >= 1, timeout_s=30, what="the traced record")
        headers = got[0].headers
        version, trace, span, flags = headers["traceparent"].split("-")
        assert (version, trace, flags) == ("00", TRACE, "01") and span != PARENT
        assert headers["ce-traceparent"] == original
        # The console exporter prints the span (batched: within its 5 s schedule).
        until(lambda: span in (tmp_path / "wt.log").read_text(), timeout_s=20, what="the span exported")
        assert '"name": "push traced"' in (tmp_path / "wt.log").read_text()
    finally:
        w.stop()
