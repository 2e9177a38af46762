"""The gateway's Prometheus metrics (``GET /metrics``), one registry per gateway."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._topics: dict[str, tuple[Any, Any]] = {}
        self.records = Counter(
            "ferry_gateway_records",
            "Records written (or scheduled) per target topic.",
            ["topic"],
            registry=self.registry,
        )
        self.bytes = Counter(
            "ferry_gateway_bytes", "Bytes of records written per target topic.", ["topic"], registry=self.registry
        )
        self.latency = Histogram(
            "ferry_gateway_request_seconds",
            "Produce requests: from the body read to every record acknowledged.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.errors = Counter(
            "ferry_gateway_errors",
            "Refused requests and records by kind (auth, forbidden, unknown_topic, not_found, bad_request, too_large, "
            "unavailable, record_refused, record_failed, http, internal).",
            ["kind"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "ferry_gateway_in_flight_bytes", "Bytes sent to Kafka and not yet acknowledged.", registry=self.registry
        )
        self.txn_lingering = Gauge(
            "ferry_gateway_txn_log_lingering",
            "1 while the transaction log's writes go through its lingering producer (FERRY_TXN_BUSY_AT).",
            registry=self.registry,
        )
        self.txn_switches = Gauge(
            "ferry_gateway_txn_log_switches",
            "Switches between the transaction log's two producers since start (at most one a second).",
            registry=self.registry,
        )
        self.txn_log_reads = Gauge(
            "ferry_gateway_txn_log_reads",
            "Commits and rollbacks since start whose transaction the live view could not answer for, so"
            " the log was read (prepared before this gateway started, evicted from the view, or the view behind).",
            registry=self.registry,
        )
        self.txn_committed_entries = Gauge(
            "ferry_gateway_txn_log_committed_entries",
            "`committed` entries written to the transaction log since start; under load one holds several"
            " transactions (ferry_gateway_txn_log_committed_transactions).",
            registry=self.registry,
        )
        self.txn_committed_transactions = Gauge(
            "ferry_gateway_txn_log_committed_transactions",
            "Transactions whose `committed` those entries hold.",
            registry=self.registry,
        )
        self.replayed = Counter(
            "ferry_gateway_idempotent_replays",
            "Requests answered from an earlier one (Idempotency-Key).",
            registry=self.registry,
        )

    def per_topic(self, topic: str) -> tuple[Any, Any]:
        """The records and bytes counters of one topic (labelled children cached: ``labels()`` per
        request costs more than the increment)."""
        found = self._topics.get(topic)
        if found is None:
            if len(self._topics) > 10_000:
                self._topics.clear()
            found = self._topics[topic] = (self.records.labels(topic), self.bytes.labels(topic))
        return found
