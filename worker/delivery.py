"""How a partition's records reach its endpoint: the :class:`Delivery` protocol, and the narrow
port it works through.

Use case: a :class:`ferry.worker.partition.PartitionRunner` owns a partition's intake — fetched
records, the filter, the ordering window, the offset merge, the lifecycle. What happens between
"the window lets this record go" and "acknowledge it" is a delivery's: push, read the answer,
wait and push again, dead-letter, acknowledge. There are two:

- :class:`ferry.worker.single_delivery.SingleDelivery`: one task per record, one record per POST
  (with the delay gate for records not yet due and durable retries through the delay store);
- :class:`ferry.worker.batch_delivery.BatchDelivery`: one task per batch of records.

Both take from the window only through :class:`DeliveryPort` and share the steps below (the
lease, the retry count, the latency), so the runner never reaches into a delivery and a delivery
never reaches into the runner's internals. States of a delivery: running → closed (``close()``:
timers cancelled; the runner cancels or drains the tasks it started).
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from typing import Any, Protocol

from ferry.subscription import PartitionRef, Subscription
from ferry.worker.context import Context
from ferry.worker.push import Record
from ferry.worker.retry import RetryPolicy
from ferry.worker.window import Window


class DeliveryPort(Protocol):
    """What a delivery may use of its partition: in, the window and the settings; out,
    acknowledgements, dead letters and counters."""

    ctx: Context
    sub: Subscription
    ref: PartitionRef
    window: Window[Record]
    policy: RetryPolicy
    live: dict[int, tuple[str, int, int | None, str | None, int | None]]
    """What the record trace shows of records being pushed, by offset."""
    retrying: dict[tuple[str, int, int, str], tuple[str, int, int | None, str | None, int | None]]
    """The same for durable retries and the retry topic's records, by where each was first read
    (``done`` when the retry topic's runner finished one)."""
    retried: int
    deferred: int
    m_retried: Any
    m_latency: Any

    def pump(self) -> None:
        """Start what the window allows now (after an acknowledgement, a timer, a change)."""

    def start_task(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as one of the partition's tasks (drained on release, cancelled on fence)."""

    def count_source(self, first: Record, cluster: str, counts: tuple[int, int, int, int]) -> None:
        """A retry topic's record, first read as ``first`` in ``cluster``: [delivered, retried,
        dead_lettered, deferred] to show on that partition's status row."""

    def acknowledged(self, record: Record, dead: bool, deferred: bool = False) -> None:
        """One record is settled: pushed, dead-lettered (``dead``) or handed to the delay store."""

    def acknowledged_many(self, records: list[Record], dead: bool) -> None:
        """Several settled records, ascending offsets, in one merge pass."""

    def cluster_of(self, record: Record) -> str:
        """The Kafka cluster the record belongs to (a copy in the retry topic: where it was first read)."""

    async def dead_letter(self, record: Record, reason: str, attempts: int) -> None:
        """Write the record's dead letter in its own cluster; returns once it is safe (retries until then)."""


class Delivery(Protocol):
    """Sees a partition's records from the window to their acknowledgement."""

    def pump(self) -> None:
        """Start every push the window (and the delivery's own gates) allow now."""

    def update(self, sub: Subscription) -> None:
        """The subscription changed (filter, batch limits, ordering): applies to what starts next."""

    def close(self) -> None:
        """Stop timers: nothing new starts."""

    @property
    def waiting_for_time(self) -> bool:
        """Nothing is in flight only because the next records are not due yet (a delay): the
        watermark waiting on them is not stalled."""


async def leased(port: DeliveryPort) -> None:
    """Wait while the worker's lease on its partitions is in doubt (ZooKeeper away): no push
    starts that another owner might also make."""
    lease = port.ctx.lease
    if not lease.allowed():
        await lease.wait()


def count_again(port: DeliveryPort, pushes: int) -> None:
    """``pushes`` pushes of records pushed before: the retried counter and metric."""
    if pushes:
        port.retried += pushes
        port.m_retried.inc(pushes)


def observe_latency(port: DeliveryPort, started: float) -> float:
    """One push answered (or given up on) ``started`` (monotonic) ago: the latency histogram."""
    latency = time.monotonic() - started
    port.m_latency.observe(latency)
    return latency
