"""Leader: while elected, keeps ``assignments/<worker>`` equal to the plan for the current world.

Use case: exactly one coordinator (elected with kazoo's Election recipe) decides who owns
which partition. Any number of standbys wait in the election; when the leader's session ends,
the next one takes over within the session timeout and starts from the assignments already in
ZooKeeper, so nothing moves just because the leader changed.

Inputs, each watched or polled: live workers (children of ``workers/``), subscriptions (the
catalog; ``subscriptions-changed`` wakes the leader at once), partition counts of every
subscribed topic and retry topic (polled). Output: per worker the partitions it owns plus the
subscription documents it needs, written only when they change. The leader never touches
partition ownership itself: workers hand partitions over through ``owner``/``epoch`` (see
``worker.zk_source``), so even two leaders for a moment cannot make two workers push one partition.

States: standby → leading (reconcile on every change, at least every poll interval) → standby
(session lost or stopping: ``run()`` returns and the election moves on).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from ferry import internal, kafka, log, zkpaths
from ferry.clock import now_ms
from ferry.config import Settings
from ferry.coordinator import starts
from ferry.coordinator.catalog import Catalog
from ferry.coordinator.metrics import CoordinatorMetrics
from ferry.coordinator.planner import moves, plan_zones
from ferry.coordinator.sharing import origin_sharing
from ferry.subscription import DEFAULT_CLUSTER, INTERNAL_PREFIX, PartitionRef, Subscription

_log = log.get_logger(__name__)


class Leader:
    def __init__(
        self, zk: KazooClient, settings: Settings, coordinator_id: str, catalog: Catalog, metrics: CoordinatorMetrics
    ) -> None:
        self.zk = zk
        self.settings = settings
        self.cluster = settings.cluster
        self.id = coordinator_id
        self.catalog = catalog
        self.metrics = metrics
        self.stopping = threading.Event()
        self._dirty = threading.Event()
        self._term = 0
        self._counts: dict[str, int] = {}
        self._counts_at = 0.0
        self._missing: set[str] = set()
        self._written: dict[str, Any] = {}
        self._known: starts.Known = {}
        self.current: dict[PartitionRef, str] = {}
        self.leading = False
        self._internal_ready = False
        self._unknown_clusters: set[tuple[str, str]] = set()
        self._counts_failed: set[str] = set()

    # --- election callback (runs in the election thread) ---------------------------------

    def run(self) -> None:
        self._term += 1
        term = self._term
        self.leading = True
        self.metrics.leader_changes.inc()
        self.metrics.is_leader.set(1)
        _log.info("leader.elected", coordinator=self.id, term=term)
        lost = threading.Event()

        def on_state(state: str) -> bool:
            if state == KazooState.LOST:
                lost.set()
                self._dirty.set()
                return True  # remove this listener
            return False

        self.zk.add_listener(on_state)
        try:
            self._publish_leader()
            self.current = self._read_assignments()
            self._known = self._read_known()
            self._written = {}

            def wake_workers(_children: list[str]) -> bool:
                self._dirty.set()
                return self._term == term and self.leading

            def wake_subscriptions(_data: bytes | None, _stat: Any) -> bool:
                self.catalog.invalidate()
                self._counts_at = 0.0  # a change may come with a new topic (e.g. a redrive's retry topic)
                self._dirty.set()
                return self._term == term and self.leading

            self.zk.ensure_path(zkpaths.workers(self.cluster))
            self.zk.ensure_path(zkpaths.subscriptions_changed(self.cluster))
            self.zk.ChildrenWatch(zkpaths.workers(self.cluster), wake_workers)
            self.zk.DataWatch(zkpaths.subscriptions_changed(self.cluster), wake_subscriptions)
            poll_s = min(self.settings.coordinator.subscription_poll_ms, self.settings.coordinator.topic_poll_ms) / 1000
            while not self.stopping.is_set() and not lost.is_set():
                self._dirty.wait(poll_s)
                self._dirty.clear()
                if self.stopping.is_set() or lost.is_set():
                    break
                if self.zk.state != KazooState.CONNECTED:
                    continue
                try:
                    self.reconcile()
                except KazooException as exc:
                    _log.warning("leader.reconcile_failed", error=repr(exc))
                    time.sleep(0.2)
                    self._dirty.set()
        finally:
            self.leading = False
            self.metrics.is_leader.set(0)
            self.zk.remove_listener(on_state)
            _log.info("leader.stepped_down", coordinator=self.id, term=term)

    def _publish_leader(self) -> None:
        doc = json.dumps({"id": self.id, "host": socket.gethostname(), "pid": os.getpid(), "since": now_ms()})
        path = zkpaths.leader(self.cluster)
        try:
            self.zk.create(path, doc.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            # The previous leader's ephemeral node lingers until its session ends: replace it.
            self.zk.delete(path)
            self.zk.create(path, doc.encode(), ephemeral=True, makepath=True)

    def _children(self, base: str) -> list[tuple[str, Any]]:
        """(name, JSON document) of each child of ``base``; a child gone meanwhile or not JSON is left out."""
        out: list[tuple[str, Any]] = []
        try:
            children = self.zk.get_children(base)
        except NoNodeError:
            return out
        for child in children:
            try:
                raw, _ = self.zk.get(f"{base}/{child}")
                out.append((child, json.loads(raw or b"{}")))
            except (NoNodeError, ValueError):
                continue
        return out

    def _read_assignments(self) -> dict[PartitionRef, str]:
        out: dict[PartitionRef, str] = {}
        for worker_id, doc in self._children(zkpaths.assignments(self.cluster)):
            for p in doc.get("partitions", []):
                ref = PartitionRef.from_entry(p)
                out[ref] = worker_id
        return out

    def _read_known(self) -> starts.Known:
        out: starts.Known = {}
        for child, doc in self._children(zkpaths.subscriptions(self.cluster)):
            try:
                out[doc["name"]] = {str(t): int(n) for t, n in doc["partitions_at_start"].items()}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                _log.warning("leader.bad_subscription_record", node=child, error=repr(exc))
        return out

    def _save_known(self, known: starts.Known) -> None:
        for name, topics in known.items():
            if self._known.get(name) != topics:
                data = json.dumps({"name": name, "partitions_at_start": topics}, separators=(",", ":")).encode()
                path = zkpaths.subscription(self.cluster, name)
                try:
                    self.zk.set(path, data)
                except NoNodeError:
                    self.zk.create(path, data, makepath=True)
        for name in set(self._known) - set(known):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(zkpaths.subscription(self.cluster, name))
        self._known = known

    # --- one planning round ----------------------------------------------------------------

    def reconcile(self) -> None:
        workers = self._workers()
        subs = self.catalog.get()
        if subs is None:
            _log.warning("leader.no_catalog", hint="the metadata database has not been readable since start")
            return
        own = internal.subscriptions(self.settings) if self.settings.coordinator.internal_work else []
        if own:
            self._ensure_internal_topics()
        active = {s.name: s for s in (*subs, *own) if s.state == "active"}
        counts = self._partition_counts(active.values())
        self._save_known(starts.record(self._known, [*subs, *own], counts, self._missing))
        # Users' partitions and Ferry's own are balanced separately, so each spreads evenly.
        users: dict[PartitionRef, float] = {}
        ours: dict[PartitionRef, float] = {}
        for s in active.values():
            into = ours if s.name.startswith(INTERNAL_PREFIX) else users
            for ref in self._partitions_of(s, counts):
                into[ref] = 1.0
        kafka_settings = self.settings.kafka
        home = {ref: kafka_settings.zone_of(ref.cluster) for group in (users, ours) for ref in group}
        new = plan_zones(workers, users, home, self.current)
        if ours:
            new.update(plan_zones(workers, ours, home, self.current))
        moved = moves(self.current, new)
        self._write(workers, new, active)
        if moved or set(new) != set(self.current):
            self.metrics.rebalances.inc()
            self.metrics.partitions_moved.inc(len(moved))
            _log.info("leader.rebalanced", workers=len(workers), partitions=len(new), moved=len(moved))
        self.current = new
        self.metrics.partitions.set(len(new))
        self.metrics.workers.set(len(workers))

    def _partitions_of(self, sub: Subscription, counts: dict[str, int]) -> list[PartitionRef]:
        """Every partition the subscription consumes: its topics in each of its clusters, and its
        retry topic (in the default cluster, where redrives write)."""
        out: list[PartitionRef] = []
        configured = self.settings.kafka.cluster_names()
        for cluster in sub.clusters:
            if cluster not in configured:
                self._warn_unknown_cluster(sub.name, cluster)
                continue
            for topic in sub.topics:
                where = starts.at(topic, cluster)
                out.extend(PartitionRef(sub.name, topic, p, cluster) for p in range(counts.get(where, 0)))
        out.extend(PartitionRef(sub.name, sub.retry_topic, p) for p in range(counts.get(sub.retry_topic, 0)))
        return out

    def _warn_unknown_cluster(self, subscription: str, cluster: str) -> None:
        if (subscription, cluster) in self._unknown_clusters:
            return
        self._unknown_clusters.add((subscription, cluster))
        _log.error(
            "leader.unknown_kafka_cluster",
            subscription=subscription,
            cluster=cluster,
            configured=list(self.settings.kafka.cluster_names()),
            hint="configure the same FERRY_KAFKA_CLUSTERS on the portal and the coordinators",
        )

    def _ensure_internal_topics(self) -> None:
        """Create the topics of Ferry's own work (delay store, transaction log) once per leadership;
        a failure is logged and tried again next round."""
        if self._internal_ready:
            return
        try:
            for name, partitions, config in internal.topics(self.settings):
                kafka.ensure_topic(self.settings.kafka.client_config(), name, partitions, config)
        except kafka.KafkaUnavailable as exc:
            _log.error("leader.internal_topics_failed", error=str(exc))
            return
        self._internal_ready = True

    def _entry(self, ref: PartitionRef, sub: Subscription) -> dict[str, Any]:
        entry: dict[str, Any] = {"subscription": ref.subscription, "topic": ref.topic, "partition": ref.partition}
        if ref.cluster != DEFAULT_CLUSTER:
            entry["cluster"] = ref.cluster
        if starts.from_beginning(sub, starts.at(ref.topic, ref.cluster), ref.partition, self._known):
            entry["start"] = "earliest"
        return entry

    def _workers(self) -> dict[str, tuple[str, float]]:
        """Live workers: id → (zone, capacity)."""
        base = zkpaths.workers(self.cluster)
        out: dict[str, tuple[str, float]] = {}
        for worker_id in self.zk.get_children(base):
            try:
                raw, _ = self.zk.get(f"{base}/{worker_id}")
                doc = json.loads(raw or b"{}")
                zone, capacity = str(doc.get("zone") or ""), float(doc.get("capacity", 1.0))
            except NoNodeError:
                continue
            except (ValueError, TypeError, AttributeError):
                zone, capacity = "", 1.0
            out[worker_id] = (zone, capacity)
        return out

    def _partition_counts(self, subs: Any) -> dict[str, int]:
        """Partition counts by :func:`starts.at` (``topic``, or ``topic@cluster`` beyond the
        default cluster). A cluster that does not answer keeps its last counts, so its
        partitions stay assigned and the other clusters' go on."""
        wanted: dict[str, set[str]] = {}
        configured = self.settings.kafka.cluster_names()
        for s in subs:
            for cluster in s.clusters:
                if cluster in configured:
                    wanted.setdefault(cluster, set()).update(s.topics)
            wanted.setdefault(DEFAULT_CLUSTER, set()).add(s.retry_topic)
        places = {starts.at(t, c) for c, topics in wanted.items() for t in topics}
        stale = time.monotonic() - self._counts_at >= self.settings.coordinator.topic_poll_ms / 1000
        if stale or not places <= set(self._counts) | self._missing:
            counts = dict(self._counts)
            missing = set(self._missing)
            ok = True
            for cluster, topics in sorted(wanted.items()):
                cfg = self.settings.kafka.for_cluster(cluster).client_config()
                try:
                    found = kafka.partition_counts(cfg, topics)
                except kafka.KafkaUnavailable as exc:
                    ok = False
                    if cluster not in self._counts_failed:
                        _log.error("leader.kafka_unavailable", cluster=cluster, error=str(exc))
                    self._counts_failed.add(cluster)
                    continue
                if cluster in self._counts_failed:
                    _log.info("leader.kafka_available", cluster=cluster)
                    self._counts_failed.discard(cluster)
                for t in topics:
                    where = starts.at(t, cluster)
                    if t in found:
                        counts[where] = found[t]
                        missing.discard(where)
                    else:
                        counts.pop(where, None)
                        missing.add(where)
            self._counts, self._missing = counts, missing
            if ok:
                self._counts_at = time.monotonic()
        return self._counts

    def _write(
        self, workers: dict[str, tuple[str, float]], assignment: dict[PartitionRef, str], subs: dict[str, Subscription]
    ) -> None:
        base = zkpaths.assignments(self.cluster)
        per_worker: dict[str, list[PartitionRef]] = {w: [] for w in workers}
        for ref, w in assignment.items():
            per_worker[w].append(ref)
        sharing = origin_sharing(per_worker, subs)
        for w, refs in per_worker.items():
            refs.sort()
            names = sorted({r.subscription for r in refs})
            doc: dict[str, Any] = {
                "partitions": [self._entry(r, subs[r.subscription]) for r in refs],
                "subscriptions": {n: subs[n].to_doc(mask_secrets=False) for n in names},
            }
            if sharing[w]:
                doc["origins"] = sharing[w]  # workers pushing to each adaptive origin
            if self._written.get(w) == doc:
                continue
            data = json.dumps({"generation": now_ms(), **doc}, separators=(",", ":")).encode()
            path = f"{base}/{w}"
            try:
                self.zk.set(path, data)
            except NoNodeError:
                self.zk.create(path, data, makepath=True)
            self._written[w] = doc
        for w in set(self.zk.get_children(base)) - set(workers):
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{base}/{w}")
            self._written.pop(w, None)
