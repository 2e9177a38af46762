"""OpenTelemetry around a push (worker/tracing.py): configured only by the OTEL_* variables; a
span per attempt, child of the record's trace context; the endpoint gets the span's context as
``traceparent`` and the record's own as ``ce-traceparent``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")  # the `otel` extra (in `dev`)

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from ferry.netguard import EndpointPolicy
from ferry.subscription import parse
from ferry.worker import tracing
from ferry.worker.http1 import Answer
from ferry.worker.push import PushClient, PushResult, Record

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
SUB = parse({"name": "orders", "topics": ["t"], "endpoint": {"url": "http://e.example/hook"}})


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),  # nothing configured: no spans, nothing added to the push path
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "zipkin-thrift"}, False),  # unknown: logged, off
    ],
)
def test_only_the_otel_variables_turn_it_on(env: dict[str, str], on: bool) -> None:
    assert (tracing.from_env(env) is not None) is on


def traced() -> tuple[tracing.PushTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracing.PushTracing(provider.get_tracer("test")), exporter


def record(headers: list[tuple[str, bytes | None]]) -> Record:
    return Record("t", 3, 42, b"k", b"v", tuple(headers), 0)  # type: ignore[arg-type]


def lines_of(raw: bytes) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in raw.decode().split("\r\n") if line)


def test_a_push_is_a_child_span_and_the_endpoint_gets_its_context() -> None:
    t, exporter = traced()
    rec = record([("traceparent", f"00-{TRACE}-{PARENT}-01".encode()), ("tracestate", b"k=v"), ("app", b"1")])
    untraced, extra, span = t.start(SUB, rec, attempt=2)
    t.end(span, PushResult(200))
    (done,) = exporter.get_finished_spans()
    assert done.name == "push orders" and done.kind is SpanKind.CLIENT
    assert done.parent is not None and f"{done.parent.span_id:016x}" == PARENT
    assert f"{done.context.trace_id:032x}" == TRACE
    assert done.attributes is not None and dict(done.attributes) == {
        "messaging.system": "kafka",
        "messaging.destination.name": "t",
        "messaging.kafka.partition": 3,
        "messaging.kafka.offset": 42,
        "ferry.subscription": "orders",
        "ferry.attempt": 2,
        "http.response.status_code": 200,
    }
    assert untraced.headers == (("app", b"1"),)  # the rest is shared with untraced records
    headers = lines_of(extra)
    assert headers["traceparent"] == f"00-{TRACE}-{done.context.span_id:016x}-01"
    assert headers["ce-traceparent"] == f"00-{TRACE}-{PARENT}-01"  # the record's own context
    assert headers["ce-tracestate"] == "k=v"


def test_a_failed_push_is_an_error_span_and_an_untraced_record_starts_a_trace() -> None:
    t, exporter = traced()
    rec = record([])
    untraced, extra, span = t.start(SUB, rec, attempt=1)
    t.end(span, PushResult(503, error=None))
    (done,) = exporter.get_finished_spans()
    assert done.parent is None and done.status.status_code is StatusCode.ERROR
    headers = lines_of(extra)
    assert headers["traceparent"].startswith("00-") and "ce-traceparent" not in headers
    assert untraced is rec


def test_the_push_client_sends_the_span_context() -> None:
    t, exporter = traced()
    sent: list[bytes] = []

    class Pool:
        async def post_lines(self, url: str, lines: bytes, body: bytes, timeout_s: float, read_body: int = 0) -> Any:
            sent.append(lines)
            return Answer(200, None)

    client = PushClient(EndpointPolicy(), "c")
    client._pool = Pool()  # type: ignore[assignment]
    client.tracing = t
    rec = record([("traceparent", f"00-{TRACE}-{PARENT}-01".encode())])
    assert asyncio.run(client.push(SUB, rec, 1)).status == 200
    (done,) = exporter.get_finished_spans()
    lines = sent[0].decode()
    assert f"\r\ntraceparent: 00-{TRACE}-{done.context.span_id:016x}-01" in lines
    assert f"\r\nce-traceparent: 00-{TRACE}-{PARENT}-01" in lines
    assert lines.count("traceparent: ") == 2  # the span's and the record's, nothing forwarded twice
