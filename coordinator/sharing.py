"""How many workers push to each adaptive endpoint origin, from the partition plan.

Use case: a subscription with ``"concurrency": {"mode": "adaptive"}`` has each worker learn how
many pushes its endpoint's origin takes at once. Workers pushing to one origin share its capacity,
so each grows its limit by its share of their growth together (``ferry.worker.limiter``); for that
it must know how many they are. The leader counts them here, from the plan it writes, and puts
each worker's counts into its assignment as ``origins``.

A worker counts for an origin when it holds at least one partition of an adaptive subscription
pushing there. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ferry.subscription import PartitionRef, Subscription


def origin_sharing(
    per_worker: Mapping[str, Iterable[PartitionRef]], subs: Mapping[str, Subscription]
) -> dict[str, dict[str, int]]:
    """For each worker, ``{origin: workers pushing there}`` over the adaptive origins it pushes to
    (workers pushing to none: an empty map)."""
    pushing: dict[str, set[str]] = {}  # worker → its adaptive origins
    for worker, refs in per_worker.items():
        mine = pushing[worker] = set()
        for ref in refs:
            sub = subs.get(ref.subscription)
            if sub is not None and sub.concurrency is not None:
                mine.add(sub.endpoint.origin)
    counts: dict[str, int] = {}
    for origins in pushing.values():
        for o in origins:
            counts[o] = counts.get(o, 0) + 1
    return {w: {o: counts[o] for o in sorted(origins)} for w, origins in pushing.items()}
