"""What every partition of a worker shares: the push client, the dead-letter sink, the metrics, the
prefetch budget, and the :class:`Lease` that says whether this worker may still start a push.

Use case: the engine builds one :class:`Context`; each partition runner and its delivery read it.
The lease is open while the worker can prove ownership of its partitions (a ZooKeeper session it
has heard from recently); once its deadline passes no new push starts until it is renewed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from ferry.worker.deadletter import DeadLetterSink
from ferry.worker.durable_retry import Deferrals
from ferry.worker.metrics import WorkerMetrics
from ferry.worker.origin_gate import Gates
from ferry.worker.push import PushClient


class Lease:
    """Whether this worker may start a push now (it can still prove ownership)."""

    def __init__(self) -> None:
        self.deadline: float | None = None
        self._open = asyncio.Event()
        self._open.set()
        self._timer: asyncio.TimerHandle | None = None

    def set(self, deadline_monotonic: float | None) -> None:
        self.deadline = deadline_monotonic
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline_monotonic is None:
            self._open.set()
            return
        remaining = deadline_monotonic - time.monotonic()
        if remaining <= 0:
            self._open.clear()
        else:
            self._open.set()
            self._timer = asyncio.get_running_loop().call_later(remaining, self._open.clear)

    def allowed(self) -> bool:
        return self._open.is_set() and (self.deadline is None or time.monotonic() < self.deadline)

    async def wait(self) -> None:
        while not self.allowed():
            self._open.clear()
            await self._open.wait()


@dataclass
class Context:
    """What every partition of a worker shares."""

    worker_id: str
    client: PushClient
    dead_letters: DeadLetterSink
    metrics: WorkerMetrics
    lease: Lease
    prefetch_records: int
    prefetch_bytes: int
    gates: Gates = field(default_factory=Gates)
    """Adaptive in-flight limits per endpoint origin (subscriptions with adaptive concurrency)."""
    deferrals: Deferrals | None = None
    """Where durable retries wait (the delay store); None: no delay store runs, retries wait in memory."""
    dead_letters_in: Callable[[str], AbstractAsyncContextManager[DeadLetterSink]] | None = None
    """The dead-letter sink of a Kafka cluster by name, held open while in use: for a copy in the
    retry topic (``default``) of a record first read in another cluster, whose dead letter goes
    to that cluster. Raises ``ConfigError`` for a cluster not configured, ``KafkaUnavailable``
    when it does not answer. None (tests): such dead letters go to the partition's own cluster."""
    wall_clock: Callable[[], float] = time.time
    """Epoch seconds: when records are due, ``Retry-After`` dates, next-attempt times. Tests
    running the runner in virtual time pass the virtual clock."""
