"""What tracing costs a push, in process: PushClient.push against an endpoint stand-in that answers
at once, 200,000 records with a ``traceparent``, without OpenTelemetry configured and with it (the
SDK's batch span processor and an in-memory exporter). One run.

    python3 -m bench.tracing
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ferry.netguard import EndpointPolicy
from ferry.subscription import parse
from ferry.worker.http1 import Answer
from ferry.worker.push import PushClient, Record

SUB = parse({"name": "orders", "topics": ["t"], "endpoint": {"url": "http://e.example/hook"}})
TP = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class _Instant:
    async def post_lines(self, url: str, lines: bytes, body: bytes, timeout_s: float, read_body: int = 0) -> Answer:
        return Answer(200, None)


async def _per_push_us(client: PushClient, records: list[Record], direct: bool = False) -> float:
    push = client._post if direct else client.push
    started = time.perf_counter()
    for r in records:
        await push(SUB, r, 1, "default")
    return (time.perf_counter() - started) / len(records) * 1e6


def main(n: int = 200_000) -> None:
    records = [Record("t", 0, i, b"k%d" % (i % 100), b"v", (("traceparent", TP),), 1_700_000_000_000) for i in range(n)]
    client = PushClient(EndpointPolicy(), "c")
    client._pool = _Instant()  # type: ignore[assignment]
    bare = min(asyncio.run(_per_push_us(client, records, direct=True)) for _ in range(3))
    off = min(asyncio.run(_per_push_us(client, records)) for _ in range(3))
    rows: list[list[Any]] = [
        ["the push without the tracing check (PushClient._post)", f"{bare:.2f}"],
        ["OpenTelemetry not configured", f"{off:.2f}"],
    ]
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from ferry.worker.tracing import PushTracing
    except ImportError:
        print("opentelemetry-sdk is not installed: pip install 'ferry[otel]'")
    else:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
        client.tracing = PushTracing(provider.get_tracer("bench"))
        on = min(asyncio.run(_per_push_us(client, records)) for _ in range(3))
        rows.append(["a span per push (batch processor, in-memory exporter)", f"{on:.2f}"])
    for name, us in rows:
        print(f"{name:60} {us:>8} µs per push")


if __name__ == "__main__":
    main()
