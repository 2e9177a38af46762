"""The portal's operations on a subscription, without HTTP: handlers parse a request, call one of
these, and render its answer (the CLI reaches them through those handlers).

Use case: reset a subscription's offsets while workers may be pushing its records. The reset is
safe by construction:

    active ─pause─▶ paused ─(no worker owns any partition)─▶ for each partition: bump its
    ownership epoch, write the new offset state with that epoch (it wins over anything written
    before) ─▶ audit ─▶ back to the state it had (a paused subscription stays paused)

The next owner of each partition restores the new state. If workers do not release the
partitions within ``release_timeout_s`` nothing is rewritten: :class:`OpError` 409, and the
subscription goes back to its previous state.

An operation works on the metadata store (a SQLAlchemy engine) and a :class:`ClusterPort` (the
portal's view of ZooKeeper and Kafka); tests give it SQLite and a fake cluster, and a clock.
Errors are :class:`OpError` with the status a handler answers (400, 404, 409).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, cast

from sqlalchemy.engine import Engine

from ferry import db, kafka, log
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.errors import FerryError
from ferry.offsets import OffsetState
from ferry.subscription import DEFAULT_CLUSTER, PartitionRef, Subscription

_log = log.get_logger(__name__)
RESET_RELEASE_TIMEOUT_S = 60.0
Target = str | int
"""Where a reset moves a subscription: ``earliest``, ``latest`` or epoch milliseconds."""


class OpError(FerryError):
    """An operation refused: ``status`` is the HTTP status a handler answers with."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


class KafkaView(Protocol):
    def start_offset(self, topic: str, partition: int) -> int: ...
    def end_offset(self, topic: str, partition: int, hint: int = 0) -> int: ...
    def scan(self, topic: str, partition: int, start: int, until_ts_ms: int | None = None) -> int: ...
    def write_state(self, sub: Subscription, ref: PartitionRef, state: OffsetState) -> None: ...
    def partition_counts(self, topics: list[str]) -> dict[str, int]: ...


class ClusterPort(Protocol):
    """What the operations need of ZooKeeper and the Kafka clusters (blocking calls)."""

    settings: Settings

    def kafka_view(self, kafka_cluster: str) -> Any: ...
    def partition_counts(self, topics: list[str]) -> dict[str, int]: ...
    def owner(self, ref: PartitionRef) -> dict[str, Any] | None: ...
    def bump_epoch(self, ref: PartitionRef) -> int: ...
    def touch_subscriptions(self) -> None: ...


def parse_target(value: Any) -> Target:
    if value in ("earliest", "latest"):
        return cast(str, value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise OpError(400, "must be 'earliest', 'latest' or a timestamp in epoch milliseconds", "to")


class Operations:
    def __init__(
        self,
        engine: Engine,
        cluster: ClusterPort,
        *,
        release_timeout_s: float = RESET_RELEASE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.engine = engine
        self.cluster = cluster
        self.release_timeout_s = release_timeout_s
        self._clock = clock
        self._sleep = sleep

    # --- reading ------------------------------------------------------------------------------

    def subscription(self, name: str) -> Subscription:
        """Blocking. :class:`OpError` 404 when there is none of that name."""
        with db.session(self.engine) as s:
            row = db.get_row(s, name)
            if row is None:
                raise OpError(404, f"no subscription named {name!r}", "name")
            return row.to_subscription()

    def partitions(self, sub: Subscription, unreachable: list[str] | None = None) -> list[PartitionRef]:
        """Blocking. Every partition of the subscription: its topics in each of its (configured)
        Kafka clusters, then its retry topic, in the default cluster. With ``unreachable``, a
        cluster other than ``default`` whose topics cannot be listed now is left out and named
        there (with why) instead of failing the whole answer."""
        configured = self.cluster.settings.kafka.cluster_names()
        out: list[PartitionRef] = []
        for kc in sub.clusters:
            if kc not in configured:
                continue
            topics = [*sub.topics, sub.retry_topic] if kc == DEFAULT_CLUSTER else list(sub.topics)
            try:
                counts = self.cluster.kafka_view(kc).partition_counts(topics)
            except kafka.KafkaUnavailable as exc:
                if unreachable is None or kc == DEFAULT_CLUSTER:
                    raise
                unreachable.append(f"Kafka cluster {kc!r} cannot be read now ({exc}): its partitions are not shown")
                continue
            out.extend(PartitionRef(sub.name, t, p, kc) for t in topics for p in range(counts.get(t, 0)))
        if DEFAULT_CLUSTER not in sub.clusters:
            counts = self.cluster.partition_counts([sub.retry_topic])
            out.extend(PartitionRef(sub.name, sub.retry_topic, p) for p in range(counts.get(sub.retry_topic, 0)))
        return out

    # --- changing -----------------------------------------------------------------------------

    async def announce(self, action: str, name: str) -> None:
        """Tell the coordinator the subscriptions changed; a failure is logged (it also polls)."""
        try:
            await asyncio.to_thread(self.cluster.touch_subscriptions)
        except Exception as exc:
            _log.warning("subscriptions.announce_failed", action=action, name=name, error=str(exc))

    async def set_state(self, name: str, state: str, actor: str) -> Subscription:
        """Pause (``paused``) or resume (``active``) a subscription, audited and announced."""

        def store() -> Subscription:
            with db.session(self.engine) as s:
                row = db.get_row(s, name)
                if row is None:
                    raise OpError(404, f"no subscription named {name!r}", "name")
                sub = row.to_subscription().with_state(state)
                db.update_subscription(s, row, sub)
                db.audit(s, actor, f"subscription.{'pause' if state == 'paused' else 'resume'}", name, {})
                return sub

        sub = await asyncio.to_thread(store)
        await self.announce(state, name)
        return sub

    async def reset(self, name: str, target: Target, actor: str, kafka_cluster: str | None = None) -> dict[str, Any]:
        """Move every partition of the subscription to ``target`` (see the module's states);
        ``kafka_cluster``: only that Kafka cluster's partitions (the retry topic is ``default``'s)."""
        sub = await asyncio.to_thread(self.subscription, name)
        await self.set_state(name, "paused", actor)
        try:
            refs = await asyncio.to_thread(self.partitions, sub)
            if kafka_cluster is not None:
                refs = [r for r in refs if r.cluster == kafka_cluster]
            await self._until_released(refs)
            partitions = await asyncio.to_thread(self._rewrite, sub, refs, target)

            def audit() -> None:
                with db.session(self.engine) as s:
                    detail: dict[str, Any] = {"to": target, "partitions": partitions}
                    if kafka_cluster is not None:
                        detail["cluster"] = kafka_cluster
                    db.audit(s, actor, "subscription.reset", name, detail)

            await asyncio.to_thread(audit)
        finally:
            if sub.state == "active":
                await self.set_state(name, "active", actor)
            else:
                await self.announce("reset", name)
        _log.info("subscription.reset", name=name, to=target, cluster=kafka_cluster, by=actor)
        answer: dict[str, Any] = {"name": name, "to": target, "partitions": partitions}
        if kafka_cluster is not None:
            answer["cluster"] = kafka_cluster
        return answer

    async def _until_released(self, refs: list[PartitionRef]) -> None:
        deadline = self._clock() + self.release_timeout_s
        while any(await asyncio.to_thread(lambda: [self.cluster.owner(r) for r in refs])):
            if self._clock() > deadline:
                raise OpError(409, "workers did not release the subscription's partitions in time; try again", "to")
            await self._sleep(0.1)

    def _rewrite(self, sub: Subscription, refs: list[PartitionRef], target: Target) -> list[dict[str, Any]]:
        out = []
        for ref in refs:
            view = self.cluster.kafka_view(ref.cluster)
            if target == "earliest":
                offset = view.start_offset(ref.topic, ref.partition)
            elif target == "latest":
                offset = view.end_offset(ref.topic, ref.partition)
            else:
                offset = view.scan(ref.topic, ref.partition, 0, until_ts_ms=int(target))
            epoch = self.cluster.bump_epoch(ref)
            state = OffsetState(committed=offset, acked=(), epoch=epoch, worker="portal", ts=now_ms())
            view.write_state(sub, ref, state)
            row: dict[str, Any] = {"topic": ref.topic, "partition": ref.partition, "committed": offset, "epoch": epoch}
            if ref.cluster != DEFAULT_CLUSTER:
                row["cluster"] = ref.cluster
            out.append(row)
        return out
