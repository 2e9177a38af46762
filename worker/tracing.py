"""OpenTelemetry around each push, when it is configured.

Use case: a producer writes a record with W3C trace context (``traceparent``, ``tracestate``
headers) and wants its trace to show the record reaching the endpoint. Without OpenTelemetry
Ferry forwards those headers unchanged, like any record header, and adds nothing to the push path.
With it — the ``opentelemetry-sdk`` package installed (``pip install 'ferry[otel]'``) and an
exporter chosen by the standard variables (``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_*``,
``OTEL_SERVICE_NAME``; ``OTEL_SDK_DISABLED=true`` turns it off) — every push attempt is a span,
child of the record's context, and the endpoint receives:

- ``traceparent`` / ``tracestate``: the push span's context (the HTTP hop, as W3C Trace Context
  says of a transport);
- ``ce-traceparent`` / ``ce-tracestate``: the record's own context, unchanged (the CloudEvents
  distributed-tracing extension: the context the event was created in).

A span: ``push <subscription>``, kind CLIENT, attributes ``messaging.system`` (kafka),
``messaging.destination.name`` (topic), ``messaging.kafka.partition``, ``messaging.kafka.offset``,
``ferry.subscription``, ``ferry.attempt``, ``http.response.status_code``; status ERROR when the
push failed. Single-record push only; batch push forwards the headers as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ferry import log
from ferry.subscription import Subscription
from ferry.worker.http1 import encode_header_lines
from ferry.worker.push import PushResult, Record

_log = log.get_logger(__name__)
TRACE_HEADERS = ("traceparent", "tracestate")


class PushTracing:
    """Starts and ends the span of one push attempt."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = tracer
        self._propagator = TraceContextTextMapPropagator()
        self._kind = SpanKind.CLIENT
        self._set_span = set_span_in_context
        self._error = (Status, StatusCode.ERROR)

    def start(self, sub: Subscription, record: Record, attempt: int) -> tuple[Record, bytes, Any]:
        """The span of this attempt; the record without its trace headers (so the partition's
        encoded header lines are shared as without tracing) and the trace header lines to add:
        the span's context, and the record's own as ``ce-traceparent``/``ce-tracestate``."""
        carrier: dict[str, str] = {}
        own: list[tuple[str, bytes | None]] = []
        for name, value in record.headers:
            low = name.lower()
            if low in TRACE_HEADERS:
                if value is not None:
                    carrier[low] = value.decode("latin-1")
                continue
            own.append((name, value))
        span = self._tracer.start_span(
            f"push {sub.name}",
            context=self._propagator.extract(carrier),
            kind=self._kind,
            attributes={
                "messaging.system": "kafka",
                "messaging.destination.name": record.topic,
                "messaging.kafka.partition": record.partition,
                "messaging.kafka.offset": record.offset,
                "ferry.subscription": sub.name,
                "ferry.attempt": attempt,
            },
        )
        lines: dict[str, str] = {f"ce-{k}": v for k, v in carrier.items()}
        self._propagator.inject(lines, context=self._set_span(span))
        untraced = record._replace(headers=tuple(own)) if len(own) != len(record.headers) else record
        return untraced, encode_header_lines(lines), span

    def end(self, span: Any, result: PushResult) -> None:
        if result.status is not None:
            span.set_attribute("http.response.status_code", result.status)
        if result.status is None or not 200 <= result.status < 300:
            status, code = self._error
            span.set_status(status(code, result.error or f"HTTP {result.status}"))
        span.end()


def from_env(environ: Mapping[str, str]) -> PushTracing | None:
    """Push tracing as the ``OTEL_*`` variables configure it; None when they do not (or the SDK
    or the chosen exporter is not installed: logged once, with what to install)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporter_name = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not exporter_name:
        configured = any(k in environ for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        exporter_name = "otlp" if configured else ""
    if exporter_name in ("", "none"):
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        _log.warning("tracing.unavailable", hint="pip install 'ferry[otel]' to trace pushes; pushing without spans")
        return None
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    elif exporter_name == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            _log.warning(
                "tracing.unavailable",
                exporter="otlp",
                hint="pip install opentelemetry-exporter-otlp-proto-http; pushing without spans",
            )
            return None
        exporter = OTLPSpanExporter()
    else:
        _log.warning(
            "tracing.unknown_exporter", exporter=exporter_name, hint="OTEL_TRACES_EXPORTER: otlp, console or none"
        )
        return None
    provider = TracerProvider(
        resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "ferry-worker")})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _log.info("tracing.on", exporter=exporter_name)
    return PushTracing(provider.get_tracer("ferry.worker"))
