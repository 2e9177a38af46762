"""Offset store: the merged state of each partition, durable in the compacted offsets topic.

- ``restore(refs)``: reads the offsets topic to its end and folds each key with the rule of
  :func:`ferry.offsets.fold` (highest epoch wins, stale writes ignored, a tombstone clears).
  The first restore reads from the beginning; later ones read only what was written since the
  previous read (the folded state of every key is kept, as raw values, between reads), so a
  handoff costs the tail of the topic, not its whole history. Each read still ends at a
  partition EOF observed after the restore was asked for, so a state the previous owner wrote
  before releasing is always seen. Concurrent restores are coalesced into one read.
- ``write(ref, state)``: produces the record (idempotent producer, keyed, so compaction keeps
  the latest per key) and queues the watermark for Kafka group ``ferry.<subscription>``;
  ``commit_groups()`` then commits everything queued with one call per group, so a flush of a
  thousand partitions costs one round trip per subscription, not one per partition. Group
  commits are best effort, for lag tools: the offsets topic is the source of truth. They run in
  daemon threads (:mod:`worker.blocking`) and can be waited for with a bound: with no coordinator
  reachable, librdkafka holds a commit for ``session.timeout.ms`` (45 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from ferry import kafka, log
from ferry.errors import OffsetRecordError
from ferry.offsets import OffsetState, StaleOffsetRecord, StateTable, encode_key, encode_value
from ferry.subscription import PartitionRef
from ferry.worker.blocking import in_daemon_thread
from ferry.worker.coalesce import Coalesced
from ferry.worker.producer import AsyncProducer

_log = log.get_logger(__name__)
OFFSETS_TOPIC_PARTITIONS = 12


class OffsetStore:
    def __init__(self, client_config: Mapping[str, Any], topic: str, producer: AsyncProducer) -> None:
        self._cfg = dict(client_config)
        self.topic = topic
        self._producer = producer
        self._committers: dict[str, Consumer] = {}
        self._to_commit: dict[str, dict[tuple[str, int], int]] = {}
        self._commit_lock = asyncio.Lock()
        self._committing: asyncio.Future[None] | None = None
        self._restores: Coalesced[PartitionRef, OffsetState | None] = Coalesced(self.read_states)
        # Kept open between restores (used by one read at a time): a handoff's restore then
        # skips connecting to the brokers, which was most of its time.
        self._reader_consumer: Consumer | None = None
        # Every key's state and where each partition was read up to: the next restore reads only what came after.
        self._table = StateTable()
        self.records_read = 0

    def ensure_topic(self) -> None:
        if kafka.ensure_topic(self._cfg, self.topic, OFFSETS_TOPIC_PARTITIONS, {"cleanup.policy": "compact"}):
            _log.info("offsets.topic_created", topic=self.topic, partitions=OFFSETS_TOPIC_PARTITIONS)

    # --- restore -------------------------------------------------------------------------

    async def restore(self, ref: PartitionRef) -> OffsetState | None:
        return await self._restores.get(ref)

    def read_states(self, refs: Iterable[PartitionRef]) -> dict[PartitionRef, OffsetState | None]:
        """Blocking: the restored state of each ref (None when it has none)."""
        table = self._table

        def take(msg: Message) -> None:
            self.records_read += 1
            key = msg.key() or b""
            try:
                table.apply(cast(int, msg.partition()), cast(int, msg.offset()), key, msg.value())
            except StaleOffsetRecord as exc:
                _log.warning("offsets.stale_record", key=key.decode(errors="replace"), error=str(exc))
            except OffsetRecordError as exc:
                _log.warning("offsets.bad_record", key=key.decode(errors="replace"), error=str(exc))

        if self._reader_consumer is None:
            self._reader_consumer = kafka.reader({**self._cfg, "group.id": "ferry.offsets-reader"}, "offsets-reader")
            kafka.IDLE_LOGS.watch(self._reader_consumer)  # between restores nobody polls it
        with kafka.IDLE_LOGS.busy(self._reader_consumer):
            ends = kafka.read_to_end(
                self._cfg, self.topic, take, start=dict(table.positions), consumer=self._reader_consumer
            )
        table.positions.update(ends)
        return {ref: table.get(encode_key(ref)) for ref in refs}

    # --- write ---------------------------------------------------------------------------

    async def write(self, ref: PartitionRef, state: OffsetState, group_id: str) -> None:
        await self._producer.send(self.topic, encode_value(state), key=encode_key(ref))
        self._to_commit.setdefault(group_id, {})[(ref.topic, ref.partition)] = state.committed

    async def commit_groups(self, timeout_s: float | None = None) -> bool:
        """Commit every queued watermark: one blocking call per group, off the event loop.

        With ``timeout_s``, waits at most that long (for an earlier commit still under way, then
        for this one) and returns False if the commits did not finish: they go on in their daemon
        thread, and a later call waits for them first. A commit that failed still counts as
        finished (it is logged; group commits are best effort)."""
        try:
            async with asyncio.timeout(timeout_s), self._commit_lock:
                # One commit at a time, so an older watermark never lands after a newer one, even
                # when the caller who started the older one stopped waiting for it.
                if self._committing is not None and not self._committing.done():
                    await asyncio.wait({self._committing})  # its outcome was its own caller's
                if self._to_commit:
                    queued, self._to_commit = self._to_commit, {}
                    job = self._committing = in_daemon_thread(self._commit, queued, name="ferry-group-commit")
                    job.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved if abandoned
                    await asyncio.shield(job)
        except TimeoutError:
            return False
        return True

    def _commit(self, queued: Mapping[str, Mapping[tuple[str, int], int]]) -> None:
        for group_id, offsets in queued.items():
            consumer = self._committers.get(group_id)
            if consumer is None:
                consumer = self._committers[group_id] = kafka.consumer(
                    {**self._cfg, "group.id": group_id, "enable.auto.commit": False}, "offsets-committer"
                )
                kafka.IDLE_LOGS.watch(consumer)  # it only commits: nothing else polls it
            try:
                with kafka.IDLE_LOGS.busy(consumer):
                    consumer.commit(
                        offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
                    )
            except KafkaException as exc:
                _log.warning("offsets.group_commit_failed", group=group_id, partitions=len(offsets), error=str(exc))

    def close(self) -> None:
        """Blocking: closing a committer waits for its commit under way (see :mod:`worker.blocking`)."""
        if self._reader_consumer is not None:
            kafka.IDLE_LOGS.forget(self._reader_consumer)
            self._reader_consumer.close()
            self._reader_consumer = None
        for c in self._committers.values():
            kafka.IDLE_LOGS.forget(c)
            c.close()
        self._committers.clear()
