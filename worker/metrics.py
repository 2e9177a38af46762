"""Worker metrics (CONTRACT section 6), on the worker's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.delivered = Counter(
            "ferry_records_delivered", "Records acknowledged by their endpoint.", ["subscription"], registry=r
        )
        self.retried = Counter(
            "ferry_records_retried", "Pushes after the first of a record.", ["subscription"], registry=r
        )
        self.dead_lettered = Counter(
            "ferry_records_dead_lettered", "Records sent to the dead-letter topic.", ["subscription"], registry=r
        )
        self.push_latency = Histogram(
            "ferry_push_latency_seconds",
            "One push: request sent to answer received.",
            ["subscription"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.in_flight = Gauge("ferry_in_flight", "Unacknowledged deliveries.", ["subscription"], registry=r)
        self.lag = Gauge(
            "ferry_consumer_lag", "High watermark minus committed.", ["subscription", "topic", "partition"], registry=r
        )
        self.commits = Counter("ferry_offset_commits", "Offset states written.", ["subscription"], registry=r)
        self.owned = Gauge("ferry_partitions_owned", "Partitions this worker owns.", registry=r)
        self.handoff_seconds = Histogram(
            "ferry_handoff_duration_seconds",
            "Taking a partition (assigned → owner → restored) or releasing it (drain + flush).",
            ["direction"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.handoffs = Counter(
            "ferry_partition_handoffs", "Partitions acquired or released by this worker.", ["direction"], registry=r
        )
