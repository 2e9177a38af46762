"""Assignment planner: which worker owns which partition. Pure: no I/O, no clock, deterministic.

Use case: the leader calls :func:`plan` whenever workers, subscriptions or partition counts
change. It must balance load and move as little as possible, because every move is a handoff
(a short pause of that one partition).

Inputs: live workers with capacity weights, partitions with weights (1.0, or recent
throughput), and the current assignment. Rules, in order:

1. A partition stays with its current worker while that worker is alive (sticky).
2. Partitions without a live owner (new, or their worker left) go, heaviest first, to the worker
   with the lowest load per capacity.
3. Then, while moving a partition from the most loaded worker (per capacity) to the least loaded
   one strictly lowers Σ load²/capacity, move the heaviest partition for which it does. The
   potential only falls, so this ends; with equal weights and capacities it ends with every
   worker within one partition of every other, and moves exactly the surplus: one worker joining
   N workers moves about 1/(N+1) of the partitions, all to it.

Zones (:func:`plan_zones`): each partition has a home zone (its Kafka cluster's). A zone's
partitions are planned over the live workers of that zone alone while it has any; the partitions
of a zone without live workers are planned over all live workers, on top of what those already
carry (``base_load``), so failover spreads them evenly; when the zone has workers again they are
orphans of their home plan and move back. With no zones configured every worker and partition is
in the zone ``""`` and the plan is :func:`plan`'s.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections.abc import Mapping
from typing import Any, TypeVar

# Partitions must be hashable and orderable (PartitionRef tuples are): order makes plans deterministic.
P = TypeVar("P", bound=tuple[Any, ...])


def plan(
    workers: Mapping[str, float],
    partitions: Mapping[P, float],
    current: Mapping[P, str],
    base_load: Mapping[str, float] | None = None,
) -> dict[P, str]:
    """The new assignment: partition → worker id. Empty when there are no workers.

    ``base_load``: load a worker already carries from partitions planned elsewhere (they neither
    move nor count as partitions here), so these partitions balance on top of it."""
    caps = {w: c for w, c in workers.items() if c > 0}
    if not caps:
        return {}
    load = {w: float((base_load or {}).get(w, 0.0)) for w in caps}
    # Per worker, its partitions sorted by (weight, partition) so the right one is found by bisect.
    held: dict[str, list[tuple[float, P]]] = {w: [] for w in caps}
    out: dict[P, str] = {}
    orphans: list[P] = []
    for p in sorted(partitions):
        w = current.get(p)
        if w in caps:
            out[p] = w
            load[w] += partitions[p]
            held[w].append((partitions[p], p))
        else:
            orphans.append(p)

    # 2. Orphans, heaviest first, to the least loaded worker per capacity.
    low = [(load[w] / caps[w], w) for w in sorted(caps)]
    heapq.heapify(low)
    for p in sorted(orphans, key=lambda q: -partitions[q]):  # stable: ties keep partition order
        _, w = heapq.heappop(low)
        out[p] = w
        load[w] += partitions[p]
        held[w].append((partitions[p], p))
        heapq.heappush(low, (load[w] / caps[w], w))
    for items in held.values():
        items.sort()

    # 3. Balance. Lazy heaps: an entry is current only if its ratio still matches the worker's load.
    hi = [(-load[w] / caps[w], w) for w in caps]
    lo = [(load[w] / caps[w], w) for w in caps]
    heapq.heapify(hi)
    heapq.heapify(lo)
    while hi and lo:
        ra, a = hi[0]
        if -ra != load[a] / caps[a]:
            heapq.heappop(hi)
            continue
        rb, b = lo[0]
        if rb != load[b] / caps[b]:
            heapq.heappop(lo)
            continue
        if a == b:
            break
        move = _best_move(held[a], load[a], caps[a], load[b], caps[b])
        if move is None:
            break
        weight = partitions[move]
        held[a].remove((weight, move))
        insort(held[b], (weight, move))
        load[a] -= weight
        load[b] += weight
        out[move] = b
        heapq.heappush(hi, (-load[a] / caps[a], a))
        heapq.heappush(hi, (-load[b] / caps[b], b))
        heapq.heappush(lo, (load[a] / caps[a], a))
        heapq.heappush(lo, (load[b] / caps[b], b))
    return out


def _best_move(items: list[tuple[float, P]], la: float, ca: float, lb: float, cb: float) -> P | None:
    """The heaviest partition of A whose move to B strictly lowers Σ load²/capacity.

    Moving weight w lowers it iff w·(1/ca + 1/cb) < 2·(la/ca − lb/cb).
    """
    gain = 2 * (la / ca - lb / cb)
    if gain <= 0 or not items:
        return None
    limit = gain / (1 / ca + 1 / cb)
    # Largest weight strictly below the limit (tiny epsilon: equal loads must not ping-pong).
    i = bisect_right(items, limit - 1e-9, key=lambda e: e[0]) - 1
    return items[i][1] if i >= 0 else None


def plan_zones(
    workers: Mapping[str, tuple[str, float]],
    partitions: Mapping[P, float],
    home: Mapping[P, str],
    current: Mapping[P, str],
) -> dict[P, str]:
    """The new assignment with zones: ``workers`` maps a worker id to its (zone, capacity),
    ``home`` a partition to its zone (``""`` when unzoned; missing means ``""``)."""
    by_zone: dict[str, dict[str, float]] = {}
    for w, (zone, cap) in workers.items():
        if cap > 0:
            by_zone.setdefault(zone, {})[w] = cap
    out: dict[P, str] = {}
    homeless: dict[P, float] = {}
    grouped: dict[str, dict[P, float]] = {}
    for p, weight in partitions.items():
        zone = home.get(p, "")
        if zone in by_zone:
            grouped.setdefault(zone, {})[p] = weight
        else:
            homeless[p] = weight
    load: dict[str, float] = {}
    for zone, parts in sorted(grouped.items()):
        planned = plan(by_zone[zone], parts, current)
        out.update(planned)
        for p, w in planned.items():
            load[w] = load.get(w, 0.0) + parts[p]
    if homeless:
        everyone = {w: cap for zone_workers in by_zone.values() for w, cap in zone_workers.items()}
        out.update(plan(everyone, homeless, current, base_load=load))
    return out


def moves(before: Mapping[P, str], after: Mapping[P, str]) -> list[P]:
    """Partitions whose owner changed (new partitions and dropped ones are not moves)."""
    return [p for p, w in after.items() if p in before and before[p] != w]
