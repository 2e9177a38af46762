"""The Kafka clients of one cluster, opened when a worker first needs them and closed when unused.

Use case: a subscription may consume its topics from several Kafka clusters (docs/zones.md). A
worker holds, per cluster it serves, one set of clients: the producer (offset states, dead
letters), the offset store over that cluster's own offsets topic, the start-offset resolver,
the dead-letter sink and the fetchers. The ``default`` cluster's set is opened when the engine
starts and kept; another cluster's set is opened by the first partition of it the worker
acquires and closed once the worker owns none, so a worker of zone ``dc1`` holds no connection
to ``dc2``'s brokers until a failover gives it ``dc2``'s partitions.

States of a set: opening (ensuring the offsets topic; a failure leaves no set behind and the
acquire fails, so the coordinator's next plan or the worker's retry tries again) → open →
closing (its clients closed within a bound, off the event loop).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from ferry import log
from ferry.config import KafkaSettings
from ferry.worker.blocking import close_within
from ferry.worker.deadletter import DeadLetterSink
from ferry.worker.fetch import Fetcher
from ferry.worker.offset_store import OffsetStore
from ferry.worker.producer import PURGED_REPORTS_S, AsyncProducer
from ferry.worker.start_offsets import StartOffsets

_log = log.get_logger(__name__)
CLOSE_GRACE_S = 2.0


INTERNAL_FETCH_WAIT_MS = 200
"""How long an idle fetch of Ferry's own partitions may wait at the broker (a broker answers at
once when data arrives; the embedded one spends CPU on every empty fetch)."""


@dataclass
class ClusterClients:
    """Every client a worker holds toward one Kafka cluster."""

    name: str
    kafka: KafkaSettings
    producer: AsyncProducer
    store: OffsetStore
    starts: StartOffsets
    dead_letters: DeadLetterSink
    fetchers: list[Fetcher] = field(default_factory=list)
    internal_fetchers: list[Fetcher] = field(default_factory=list)
    """Fetchers of Ferry's own partitions (delay store, back-checks): see :meth:`fetch_config`."""

    @classmethod
    def create(cls, kafka: KafkaSettings) -> ClusterClients:
        """The clients, not yet connected (librdkafka connects on first use)."""
        producer = AsyncProducer(kafka.client_config())
        return cls(
            name=kafka.name,
            kafka=kafka,
            producer=producer,
            store=OffsetStore(kafka.client_config(), kafka.offsets_topic, producer),
            starts=StartOffsets(kafka.client_config()),
            dead_letters=DeadLetterSink(kafka.client_config(), producer),
        )

    def fetch_config(self, internal: bool = False) -> dict[str, object]:
        """A fetcher's client settings; ``internal``: for Ferry's own work, whose records are
        fetched well before they are due, so an idle fetch may wait :data:`INTERNAL_FETCH_WAIT_MS`."""
        wait = max(self.kafka.fetch_wait_max_ms, INTERNAL_FETCH_WAIT_MS) if internal else self.kafka.fetch_wait_max_ms
        return self.kafka.client_config(**{"fetch.wait.max.ms": wait})

    def closers(self, flush_s: float, grace_s: float = CLOSE_GRACE_S) -> dict[str, Callable[[], object]]:
        """Blocking close calls by name (for :func:`worker.blocking.close_within`)."""
        prefix = "" if self.name == "default" else f"{self.name}:"
        out: dict[str, Callable[[], object]] = {
            f"{prefix}fetcher-{f.name}": functools.partial(f.stop, grace_s)
            for f in [*self.fetchers, *self.internal_fetchers]
        }
        out[f"{prefix}producer"] = functools.partial(self.producer.close, flush_s)
        out[f"{prefix}start-offsets"] = self.starts.close
        out[f"{prefix}offset-store"] = self.store.close
        return out


async def open_cluster(kafka: KafkaSettings) -> ClusterClients:
    """A cluster's clients with its offsets topic ensured; raises ``KafkaUnavailable`` (and
    closes what it opened) when the cluster does not answer."""
    clients = ClusterClients.create(kafka)
    try:
        await asyncio.to_thread(clients.store.ensure_topic)
    except BaseException:
        await close_within(clients.closers(0.0), CLOSE_GRACE_S + PURGED_REPORTS_S)
        raise
    _log.info("kafka_cluster.opened", cluster=kafka.name, bootstrap=kafka.bootstrap)
    return clients


async def close_cluster(clients: ClusterClients, flush_s: float) -> list[str]:
    """Close every client of the set within a bound; the names of those left running."""
    left = await close_within(clients.closers(flush_s), CLOSE_GRACE_S + PURGED_REPORTS_S)
    _log.info("kafka_cluster.closed", cluster=clients.name, left_open=left)
    return left
