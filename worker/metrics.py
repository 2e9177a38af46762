"""Worker metrics (docs/contract.md §6), on the worker's own registry.

The per-record ones (delivered, retried, dead-lettered, push latency) are :class:`LoopCounter`
and :class:`LoopHistogram`: plain numbers updated on the event loop, turned into metric families
only when ``/metrics`` is scraped. prometheus_client's own take a lock per update and walk the
buckets in Python: ~1.6 µs per pushed record, several per cent of the single-record path
(bench/worker_profile.py). Everything else keeps prometheus_client's classes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class LoopCounter(Collector):
    """A counter with one label, exported as ``<name>_total``; updates are not locked (one thread)."""

    def __init__(self, name: str, documentation: str, label: str, registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self._children: dict[str, _Count] = {}
        registry.register(self)

    def labels(self, value: str) -> _Count:
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = _Count()
        return child

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, child in list(self._children.items()):
            family.add_metric([value], child.value)
        yield family


class _Buckets:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1
        self.sum += amount


class LoopHistogram(Collector):
    """A histogram with one label; buckets are upper bounds, inclusive, as Prometheus defines them."""

    def __init__(
        self, name: str, documentation: str, label: str, buckets: Sequence[float], registry: CollectorRegistry
    ) -> None:
        self.name, self.documentation, self.label = name, documentation, label
        self.bounds = tuple(sorted(buckets))
        self._children: dict[str, _Buckets] = {}
        registry.register(self)

    def labels(self, value: str) -> _Buckets:
        child = self._children.get(value)
        if child is None:
            child = self._children[value] = _Buckets(self.bounds)
        return child

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, child in list(self._children.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*self.bounds, float("inf")), list(child.counts), strict=True):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
            family.add_metric([value], buckets, child.sum)
        yield family


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.delivered = LoopCounter(
            "ferry_records_delivered", "Records acknowledged by their endpoint.", "subscription", r
        )
        self.retried = LoopCounter("ferry_records_retried", "Pushes after the first of a record.", "subscription", r)
        self.dead_lettered = LoopCounter(
            "ferry_records_dead_lettered", "Records sent to the dead-letter topic.", "subscription", r
        )
        self.filtered = LoopCounter(
            "ferry_records_filtered",
            "Records the subscription's filter rejected (acknowledged without a push).",
            "subscription",
            r,
        )
        self.push_latency = LoopHistogram(
            "ferry_push_latency_seconds",
            "One push: request sent to answer received.",
            "subscription",
            LATENCY_BUCKETS_S,
            r,
        )
        self.in_flight = Gauge("ferry_in_flight", "Unacknowledged deliveries.", ["subscription"], registry=r)
        self.endpoint_limit = Gauge(
            "ferry_endpoint_concurrency_limit",
            "The adaptive in-flight limit toward an endpoint origin (subscriptions with adaptive concurrency).",
            ["origin"],
            registry=r,
        )
        self.endpoint_baseline = Gauge(
            "ferry_endpoint_no_queue_latency_seconds",
            "The lowest recent push latency toward an endpoint origin: its latency without a queue.",
            ["origin"],
            registry=r,
        )
        # Ferry's own work on this worker (docs/delay.md, docs/transactions.md): read when scraped.
        self.internal = Gauge(
            "ferry_internal",
            "The delay store's and the transaction back-checks' figures on this worker: delay_moved, "
            "delay_delivered, delay_invalid, delay_late_p99_ms, txn_prepared, txn_checks, txn_check_failures, "
            "txn_committed, txn_rolled_back, txn_oldest_prepared_age_s.",
            ["figure"],
            registry=r,
        )
        self.lag = Gauge(
            "ferry_consumer_lag",
            "High watermark minus committed.",
            ["subscription", "topic", "partition", "cluster"],
            registry=r,
        )
        self.stalled = Gauge(
            "ferry_watermark_stalled_seconds",
            "How long records have been held at or above the committed watermark while it did not move"
            " (a head-of-line block: one record the endpoint keeps failing); 0 while it moves.",
            ["subscription", "topic", "partition", "cluster"],
            registry=r,
        )
        self.commits = Counter("ferry_offset_commits", "Offset states written.", ["subscription"], registry=r)
        self.fetch_gates = Counter(
            "ferry_fetch_gates",
            "A partition's fetch held (buffer at 5/8 of its prefetch bound), paused (at the bound: librdkafka"
            " drops what it had fetched for it and fetches it again) or opened again.",
            ["subscription", "gate"],
            registry=r,
        )
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
