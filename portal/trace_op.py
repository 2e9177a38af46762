"""Where is my record: the record trace of docs/contract.md §12, gathered from what Ferry keeps.

Use case: ``GET /api/v1/subscriptions/{name}/records/{topic}/{partition}/{offset}`` (and the
``ferry trace`` command through it). :func:`trace_record` gathers the facts and
:func:`ferry.trace.decide` decides:

- the log's start and end (one short read each, never a scan from the start);
- the partition's merged offset state from the offsets topic (read incrementally by the portal);
- the owning worker's published stats: which records it is pushing, their attempts, last answer
  and next attempt (refreshed every second); for an acknowledged record, every worker's
  ``retrying`` of the subscription: a durable retry waiting in the delay store, or a record of
  the retry topic being pushed, named by where it was first read;
- for an acknowledged record, a bounded dead-letter lookup: the last :data:`DLQ_LOOKUP` dead
  letters of each dead-letter partition are searched for the record's ``ferry-source-*`` headers
  (an older dead letter shows as ``delivered``);
- for an acknowledged record that was not dead-lettered, the record itself (one fetch at its
  offset), evaluated against the subscription's filter: rejected means ``filtered``.

Blocking (ZooKeeper, Kafka): call it from a thread.
"""

from __future__ import annotations

from typing import Any, cast

from ferry import filters, trace
from ferry.filters.attributes import RecordAttributes
from ferry.portal.cluster import Cluster
from ferry.subscription import DEFAULT_CLUSTER, SOURCE_CLUSTER_HEADER, PartitionRef, Subscription

DLQ_LOOKUP = 10_000


def trace_record(
    cluster: Cluster, sub: Subscription, topic: str, partition: int, offset: int, kafka_cluster: str = DEFAULT_CLUSTER
) -> dict[str, Any]:
    """``cluster``: the portal's view of the record's Kafka cluster (:meth:`Cluster.kafka_view`)."""
    ref = PartitionRef(sub.name, topic, partition, kafka_cluster)
    log_start = cluster.start_offset(topic, partition)
    log_end = cluster.end_offset(topic, partition)
    state = cluster.offset_states([ref]).get(ref)
    committed = state.committed if state is not None else None
    acked = [list(r) for r in state.acked] if state is not None else []
    every = cluster.worker_stats()
    stats = every.get(ref)
    worker = stats.get("worker") if stats else None
    live = None
    for entry in (stats or {}).get("live", []):
        if entry[0] == offset:
            live = trace.Live(entry[1], entry[2], entry[3], entry[4], entry[5])
            break
    dead = None
    filtered = False
    retrying, retrying_worker = None, None
    if log_start <= offset < log_end and trace.acknowledged(offset, committed, acked):
        retrying, retrying_worker = retrying_of(every, ref, offset)
        dead = _dead_letter(cluster, sub, topic, partition, offset, kafka_cluster) if retrying is None else None
        if dead is None and sub.filter is not None:
            filtered = _filtered(cluster, sub, topic, partition, offset)
    answer = trace.decide(
        topic=topic,
        partition=partition,
        offset=offset,
        log_start=log_start,
        log_end=log_end,
        committed=committed,
        acked=acked,
        worker=cast(str | None, worker),
        live=live,
        retrying=retrying,
        retrying_worker=retrying_worker,
        dead_letter=dead,
        filtered=filtered,
    )
    return {**answer, "cluster": kafka_cluster}


def retrying_of(
    every: dict[PartitionRef, dict[str, Any]], ref: PartitionRef, offset: int
) -> tuple[trace.Live | None, str | None]:
    """What the workers' ``retrying`` say of the record at ``offset`` of ``ref`` (a partition's
    stats list those of its subscription by where they were first read), the latest if several
    workers have a word (a wait not yet over where it was deferred, the push of its retry)."""
    want = [ref.topic, ref.partition, offset, ref.cluster]
    best: tuple[tuple[int, int], list[Any], str | None] | None = None
    for where, stats in every.items():
        if where.subscription != ref.subscription:
            continue
        for entry in stats.get("retrying") or ():
            if list(entry[:4]) != want:
                continue
            # The latest: the most pushes; after push n, a wait is later than the push in flight,
            # and the retry's end later than both.
            rank = (entry[5], _LATER.get(entry[4], 0))
            if best is None or rank > best[0]:
                best = (rank, entry, cast(str | None, stats.get("worker")))
    if best is None or best[1][4] == "done":
        return None, None  # done: the offset state, dead letters and filter say how it ended
    entry = best[1]
    return trace.Live(entry[4], entry[5], entry[6], entry[7], entry[8]), best[2]


_LATER = {"in_flight": 0, "waiting_retry": 1, "done": 2}


def _dead_letter(
    cluster: Cluster, sub: Subscription, topic: str, partition: int, offset: int, kafka_cluster: str
) -> trace.DeadLetter | None:
    """The record's dead letter in its cluster's dead-letter topic. One that names another source
    cluster (``ferry-source-cluster``) is another record with the same topic, partition and offset."""
    want = {"ferry-source-topic": topic.encode(), "ferry-source-partition": str(partition).encode()}
    want["ferry-source-offset"] = str(offset).encode()
    mine = kafka_cluster.encode()
    for m in reversed(cluster.last_records(sub.dead_letter_topic, DLQ_LOOKUP)):
        headers = cast(dict[str, bytes], dict(cast(list[Any], m.headers() or [])))
        if all(headers.get(k) == v for k, v in want.items()) and headers.get(SOURCE_CLUSTER_HEADER, mine) == mine:
            attempts = headers.get("ferry-attempts") or b"0"
            error = headers.get("ferry-error") or b""
            return trace.DeadLetter(int(attempts), error.decode("utf-8", "replace"))
    return None


def _filtered(cluster: Cluster, sub: Subscription, topic: str, partition: int, offset: int) -> bool:
    m = cluster.record_at(topic, partition, offset)
    if m is None:
        return False
    attrs = RecordAttributes(
        topic, partition, offset, m.key(), cast(list[Any], m.headers() or []), m.timestamp()[1], cluster.name, sub.name
    )
    ok, _ = filters.parse(sub.filter).matches(attrs)
    return not ok
