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
) -> dict[P, str]:
    """The new assignment: partition → worker id. Empty when there are no workers."""
    caps = {w: c for w, c in workers.items() if c > 0}
    if not caps:
        return {}
    load = dict.fromkeys(caps, 0.0)
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


def moves(before: Mapping[P, str], after: Mapping[P, str]) -> list[P]:
    """Partitions whose owner changed (new partitions and dropped ones are not moves)."""
    return [p for p, w in after.items() if p in before and before[p] != w]
