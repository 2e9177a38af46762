"""What the portal reads from and writes to the running cluster (ZooKeeper and Kafka). Blocking:
call from a thread. The portal never imports worker code; it speaks the shared contracts
(``ferry.zkpaths``, ``ferry.offsets``) like any other client would.

Partition ends are found by reading to partition EOF from a hint (ListOffsets, or the committed
offset), never by trusting ListOffsets alone: on real Kafka the scan is empty, on brokers that
answer ListOffsets wrongly it still finds the true end.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections import deque
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry import kafka, zkpaths
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.errors import FerryError
from ferry.offsets import OffsetState, StateTable, encode_key, encode_value
from ferry.subscription import DEFAULT_CLUSTER, INTERNAL_PREFIX, SOURCE_CLUSTER_HEADER, PartitionRef, Subscription
from ferry.zk import close_within, make_client
from ferry.zk import start as zk_start

SCAN_TIMEOUT_S = 10.0
HINT_TIMEOUT_S = 3.0
"""A partition end read from a hint that gives nothing for this long is read from its beginning."""


REDRIVE_MEMORY = 10_000
"""Redriven dead letters remembered per retry-topic partition (older ones could be redriven again)."""


def redrive_mark(m: Message, kafka_cluster: str = DEFAULT_CLUSTER) -> str:
    """How a redriven copy names its dead letter (``ferry-redriven-from``): ``<partition>/<offset>``
    in the dead-letter topic, prefixed ``<cluster>:`` for a cluster other than ``default``."""
    where = f"{m.partition()}/{m.offset()}"
    return where if kafka_cluster == DEFAULT_CLUSTER else f"{kafka_cluster}:{where}"


class ClusterBusy(FerryError):
    """The cluster did not reach the state an operation waits for (e.g. owners releasing)."""


class Cluster:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.name = settings.cluster
        self.cfg = settings.kafka.client_config()
        self.zk = make_client(settings)
        self._offsets = StateTable()
        self._offsets_lock = threading.Lock()
        self._views: dict[str, Cluster] = {}

    def kafka_view(self, kafka_cluster: str) -> Cluster:
        """This cluster as seen through another Kafka cluster: the same ZooKeeper, that cluster's
        Kafka clients and its own offsets table (its offsets topic has the same name). Raises
        ``ConfigError`` for a cluster ``FERRY_KAFKA_CLUSTERS`` does not name."""
        if kafka_cluster == DEFAULT_CLUSTER:
            return self
        with self._offsets_lock:
            view = self._views.get(kafka_cluster)
            if view is None:
                view = copy.copy(self)
                view.cfg = self.settings.kafka.for_cluster(kafka_cluster).client_config()
                view._offsets = StateTable()
                view._offsets_lock = threading.Lock()
                view._views = {}
                self._views[kafka_cluster] = view
            return view

    def start(self) -> None:
        zk_start(self.zk, self.settings)

    def stop(self) -> None:
        close_within(self.zk)  # with ZooKeeper gone, stopping must still end

    # --- ZooKeeper -----------------------------------------------------------------------

    def touch_subscriptions(self) -> None:
        path = zkpaths.subscriptions_changed(self.name)
        data = str(now_ms()).encode()
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)

    def _json(self, path: str) -> Any:
        try:
            raw, _ = self.zk.get(path)
        except NoNodeError:
            return None
        try:
            return json.loads(raw or b"null")
        except ValueError:
            return None

    def workers(self) -> list[dict[str, Any]]:
        out = []
        try:
            ids = sorted(self.zk.get_children(zkpaths.workers(self.name)))
        except NoNodeError:
            return []
        for wid in ids:
            doc = self._json(zkpaths.worker(self.name, wid)) or {}
            assignment = self._json(zkpaths.assignment(self.name, wid)) or {}
            owned = assignment.get("partitions", [])
            # Ferry's own work (delay store, transaction checks) is counted, not listed.
            ours = [p for p in owned if p["subscription"].startswith(INTERNAL_PREFIX)]
            out.append(
                {
                    "id": wid,
                    "host": doc.get("host"),
                    "since": doc.get("since"),
                    "zone": doc.get("zone") or "",
                    "partitions": [
                        {k: p[k] for k in ("subscription", "topic", "partition", "cluster") if k in p}
                        for p in owned
                        if not p["subscription"].startswith(INTERNAL_PREFIX)
                    ],
                    "internal_partitions": len(ours),
                }
            )
        return out

    def owner(self, ref: PartitionRef) -> dict[str, Any] | None:
        doc = self._json(zkpaths.owner(self.name, *ref))
        return doc if isinstance(doc, dict) else None

    def worker_stats(self) -> dict[PartitionRef, dict[str, Any]]:
        out: dict[PartitionRef, dict[str, Any]] = {}
        try:
            ids = self.zk.get_children(zkpaths.stats(self.name))
        except NoNodeError:
            return out
        for wid in ids:
            doc = self._json(zkpaths.worker_stats(self.name, wid)) or {}
            for p in doc.get("partitions", []):
                out[PartitionRef.from_entry(p)] = {**p, "worker": wid}
        return out

    def worker_docs(self) -> dict[str, dict[str, Any]]:
        """Every live worker's published stats document, by worker id."""
        try:
            ids = self.zk.get_children(zkpaths.stats(self.name))
        except NoNodeError:
            return {}
        return {wid: self._json(zkpaths.worker_stats(self.name, wid)) or {} for wid in ids}

    def bump_epoch(self, ref: PartitionRef) -> int:
        """Compare-and-set the ownership epoch +1 while nobody owns the partition."""
        path = zkpaths.epoch(self.name, *ref)
        for _ in range(20):
            try:
                raw, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, b"1", makepath=True)
                    return 1
                except NodeExistsError:
                    continue
            new = int(raw or b"0") + 1
            try:
                self.zk.set(path, str(new).encode(), version=stat.version)
                return new
            except Exception:  # noqa: S112 - BadVersion: someone bumped it meanwhile, read again
                continue
        raise ClusterBusy(f"could not bump the epoch of {ref.key()}: it keeps changing")

    # --- Kafka ---------------------------------------------------------------------------

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        return kafka.partition_counts(self.cfg, topics)

    def offset_states(self, refs: list[PartitionRef]) -> dict[PartitionRef, OffsetState | None]:
        """The state a new owner would restore for each ref: the offsets topic is read from where
        the previous call stopped (the first call reads it all) into one table of every key."""
        table = self._offsets

        def take(msg: Message) -> None:
            with contextlib.suppress(FerryError):  # bad and stale records are skipped, as a restore skips them
                table.apply(cast(int, msg.partition()), cast(int, msg.offset()), msg.key() or b"", msg.value())

        with self._offsets_lock:
            ends = kafka.read_to_end(
                {**self.cfg, "group.id": "ferry.portal"},
                self.settings.kafka.offsets_topic,
                take,
                start=dict(table.positions),
            )
            table.positions.update(ends)
            return {ref: table.get(encode_key(ref)) for ref in refs}

    def _consumer(self) -> Consumer:
        return kafka.reader({**self.cfg, "group.id": "ferry.portal"}, "portal")

    def scan(self, topic: str, partition: int, start: int, until_ts_ms: int | None = None) -> int:
        """Read forward from ``start`` to the partition's end; returns the end offset, or with
        ``until_ts_ms`` the first offset whose timestamp is at or after it (else the end)."""
        c = self._consumer()
        try:
            return self._read_to_end(c, topic, partition, start, until_ts_ms=until_ts_ms)
        finally:
            c.close()

    def end_offset(self, topic: str, partition: int, hint: int = 0) -> int:
        """The partition's true end, read from the highest of ``hint`` and ListOffsets' answer (rewound
        to the beginning if that is past the end)."""
        c = self._consumer()
        try:
            try:
                _, hw = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)
            except Exception:
                hw = 0
            start = max(hint, hw, 0) if hw >= 0 else max(hint, 0)
            return self._read_to_end(c, topic, partition, start, rewind_after_s=HINT_TIMEOUT_S)
        finally:
            c.close()

    @staticmethod
    def _read_to_end(
        c: Consumer,
        topic: str,
        partition: int,
        start: int,
        until_ts_ms: int | None = None,
        rewind_after_s: float | None = None,
    ) -> int:
        until = None if until_ts_ms is None else (lambda m: m.timestamp()[1] >= until_ts_ms)
        try:
            ends = kafka.read_partitions_to_end(
                c,
                {(topic, partition): start},
                until=until,
                rewind_after_s=rewind_after_s,
                timeout_s=SCAN_TIMEOUT_S,
                ignore_errors=True,
            )
        except kafka.KafkaUnavailable:
            raise ClusterBusy(
                f"reading {topic}[{partition}] did not reach its end within {SCAN_TIMEOUT_S:.0f} s"
            ) from None
        return ends[(topic, partition)]

    def record_at(self, topic: str, partition: int, offset: int) -> Message | None:
        """The record at ``offset`` (None when the log does not hold it): one fetch."""
        found: list[Message] = []

        def first(m: Message) -> bool:
            if m.offset() == offset:
                found.append(m)
            return True

        c = self._consumer()
        try:
            kafka.read_partitions_to_end(
                c, {(topic, partition): offset}, until=first, timeout_s=SCAN_TIMEOUT_S, ignore_errors=True
            )
        except kafka.KafkaUnavailable:
            return None
        finally:
            c.close()
        return found[0] if found else None

    def start_offset(self, topic: str, partition: int) -> int:
        """The first offset still in the log (or the end when empty)."""
        return self.scan(topic, partition, OFFSET_BEGINNING, until_ts_ms=0)

    def write_state(self, sub: Subscription, ref: PartitionRef, state: OffsetState) -> None:
        p = kafka.producer({**self.cfg, "enable.idempotence": True, "partitioner": "murmur2_random"}, "portal")
        p.produce(self.settings.kafka.offsets_topic, value=encode_value(state), key=encode_key(ref))
        if p.flush(15) != 0:
            raise ClusterBusy(f"the offsets topic did not confirm the new state of {ref.key()}")
        c = kafka.consumer({**self.cfg, "group.id": sub.group_id, "enable.auto.commit": False}, "portal")
        try:
            c.commit(offsets=[TopicPartition(ref.topic, ref.partition, state.committed)], asynchronous=False)
        finally:
            c.close()

    def last_records(self, topic: str, limit: int) -> list[Message]:
        """The last ``limit`` records of a topic (all partitions, newest last by timestamp).

        Each partition is read from ``limit`` before its high watermark, so a dead-letter topic of
        millions of records costs ``limit`` records per partition. A broker that reports too low
        a watermark only makes the read longer: it still runs to the partition's true end.
        """
        c = self._consumer()
        try:
            meta = c.list_topics(topic, timeout=10).topics.get(topic)
            parts = sorted(meta.partitions) if meta is not None and meta.error is None and meta.partitions else []
            start: dict[int, int] = {}
            for p in parts:
                try:
                    low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                except KafkaException:
                    continue  # read that partition from its beginning
                if high >= 0:
                    start[p] = max(low, high - limit, 0)
        finally:
            c.close()
        newest: dict[int, deque[Message]] = {p: deque(maxlen=limit) for p in parts}

        def keep(m: Message) -> None:
            newest[cast(int, m.partition())].append(m)

        kafka.read_to_end({**self.cfg, "group.id": "ferry.portal"}, topic, keep, start=start, timeout_s=SCAN_TIMEOUT_S)
        records = sorted(
            (m for q in newest.values() for m in q),
            key=lambda m: (m.timestamp()[1], m.partition() or 0, m.offset() or 0),
        )
        return records[-limit:] if limit else []

    def redriven(self, sub: Subscription) -> set[str]:
        """The dead letters already redriven (``<partition>/<offset>`` in the dead-letter topic), from
        the ``ferry-redriven-from`` header of the last records of the subscription's retry topic."""
        done: set[str] = set()
        for m in self.last_records(sub.retry_topic, REDRIVE_MEMORY):
            for name, value in cast(list[tuple[str, Any]], m.headers() or []):
                if name == "ferry-redriven-from" and value:
                    done.add(value.decode() if isinstance(value, bytes) else str(value))
        return done

    def redrive(
        self, sub: Subscription, records: list[Message], source_cluster: str = DEFAULT_CLUSTER
    ) -> tuple[int, int]:
        """Produce dead letters to the subscription's own retry topic (never to a shared source
        topic), each once: (redriven now, skipped because redriven before). The retry topic is in
        this (the default) cluster, whichever cluster the dead letters were read from: a copy of a
        dead letter of ``source_cluster`` other than ``default`` carries ``ferry-source-cluster``,
        so the worker pushes it with that cluster's ``ce-kafkacluster`` and dead-letters it there
        again (docs/zones.md). A dead letter that names its cluster itself keeps that one."""
        counts = kafka.partition_counts(self.cfg, [sub.dead_letter_topic])
        kafka.ensure_topic(self.cfg, sub.retry_topic, max(1, counts.get(sub.dead_letter_topic, 1)))
        before = self.redriven(sub)
        p = kafka.producer({**self.cfg, "enable.idempotence": True}, "portal")
        sent = 0
        for m in records:
            where = redrive_mark(m, source_cluster)
            if where in before:
                continue
            own = cast(list[tuple[str, Any]], m.headers() or [])
            first_read = next((v for k, v in own if k == SOURCE_CLUSTER_HEADER and v), None)
            headers = [(k, v) for k, v in own if k != SOURCE_CLUSTER_HEADER]
            if first_read is not None:
                headers.append((SOURCE_CLUSTER_HEADER, first_read))
            elif source_cluster != DEFAULT_CLUSTER:
                headers.append((SOURCE_CLUSTER_HEADER, source_cluster.encode()))
            headers.append(("ferry-redriven-from", where.encode()))
            p.produce(sub.retry_topic, key=m.key(), value=m.value(), headers=headers)
            sent += 1
        if p.flush(30) != 0:
            raise ClusterBusy("the retry topic did not confirm every redriven record")
        return sent, len(records) - sent
