"""Coordinator metrics (docs/contract.md §6), on the coordinator's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class CoordinatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.rebalances = Counter("ferry_rebalances", "Planning rounds that changed the assignment.", registry=r)
        self.partitions_moved = Counter(
            "ferry_partitions_moved", "Partitions handed from one worker to another.", registry=r
        )
        self.leader_changes = Counter("ferry_leader_changes", "Times this coordinator became leader.", registry=r)
        self.is_leader = Gauge("ferry_is_leader", "1 while this coordinator leads.", registry=r)
        self.partitions = Gauge("ferry_assigned_partitions", "Partitions in the current assignment.", registry=r)
        self.workers = Gauge("ferry_live_workers", "Workers registered in ZooKeeper.", registry=r)
