"""Partitions a subscription met later: where a ``start_from: latest`` subscription starts them.

Use case: ``latest`` means "the records produced from now on". A partition that exists when the
subscription starts begins at its end, as a consumer group with ``auto.offset.reset=latest``
would. A partition that appears afterwards (the topic gained partitions, or the topic was
created after the subscription) holds only records produced since, and its first owner may come
seconds after its first records: starting it at its end, as consumer groups do, silently skips
them. Ferry starts such a partition at its beginning.

To know which is which, the leader records for each subscription how many partitions each of its
topics had when the subscription first met it (0 for a topic that did not exist yet), in
``subscriptions/<name>`` (:mod:`ferry.zkpaths`), so a new leader knows it too. A partition at or
above that count was met later; its assignment entry says ``"start": "earliest"``. The worker
applies it only to a partition with no offset state yet: an owned partition keeps its state.

Pure: no I/O. The leader reads and writes the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ferry.subscription import DEFAULT_CLUSTER, Subscription

# subscription name -> place (see at()) -> partitions the topic had when the subscription first met it
Known = dict[str, dict[str, int]]


def at(topic: str, cluster: str) -> str:
    """Where a topic is: its name in the default cluster (as records always said), ``topic@cluster``
    in another ('@' is in no topic name)."""
    return topic if cluster == DEFAULT_CLUSTER else f"{topic}@{cluster}"


def record(known: Known, subs: Iterable[Subscription], counts: Mapping[str, int], missing: set[str]) -> Known:
    """``known`` with every topic of every subscription that it lacks and whose partition count is
    certain now: ``counts`` (read from Kafka) or ``missing`` (Kafka said the topic does not exist,
    recorded as 0). A topic whose count is unknown (Kafka unreachable) waits for the next round,
    since recording a guess could start existing partitions at their beginning. Subscriptions not
    in ``subs`` (deleted) are dropped, so a new subscription of the same name starts afresh."""
    out: Known = {}
    for sub in subs:
        topics = dict(known.get(sub.name, {}))
        for where in (at(t, c) for c in sub.clusters for t in sub.topics):
            if where in topics:
                continue
            if where in counts:
                topics[where] = counts[where]
            elif where in missing:
                topics[where] = 0
        out[sub.name] = topics
    return out


def from_beginning(sub: Subscription, where: str, partition: int, known: Known) -> bool:
    """Whether the partition's first owner starts at its beginning although ``start_from`` is
    ``latest``: the subscription met it after it started. ``where``: see :func:`at`."""
    if sub.start_from != "latest":
        return False
    count = known.get(sub.name, {}).get(where)
    return count is not None and partition >= count
