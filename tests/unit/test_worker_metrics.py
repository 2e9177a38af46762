"""The worker's lock-free per-record metrics expose exactly what prometheus_client's own would."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ferry.worker.metrics import LATENCY_BUCKETS_S, LoopCounter, LoopHistogram


def _lines(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines() if "_created" not in line)


@pytest.mark.parametrize(
    "observations",
    [
        [],
        [0.0005, 0.001, 0.0010001, 0.004, 40.0],  # on a bound, just above it, beyond the last
        [0.0, 30.0, 30.5, 0.25, 0.25, 9.99],
    ],
)
def test_histogram_matches_prometheus_client(observations: list[float]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopHistogram("ferry_push_latency_seconds", "One push.", "subscription", LATENCY_BUCKETS_S, ours)
    ref = Histogram(
        "ferry_push_latency_seconds", "One push.", ["subscription"], buckets=LATENCY_BUCKETS_S, registry=theirs
    )
    for sub in ("a", "b"):
        mine.labels(sub)
        ref.labels(sub)
        for x in observations:
            mine.labels(sub).observe(x)
            ref.labels(sub).observe(x)
    assert _lines(ours) == _lines(theirs)


def test_counter_matches_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopCounter("ferry_records_delivered", "Delivered.", "subscription", ours)
    ref = Counter("ferry_records_delivered", "Delivered.", ["subscription"], registry=theirs)
    for sub, n in (("a", 1), ("a", 3), ("b", 100)):
        mine.labels(sub).inc(n)
        ref.labels(sub).inc(n)
    assert _lines(ours) == _lines(theirs)
