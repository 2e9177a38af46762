"""The verdict of one fault scenario: what was produced against what the endpoint logged. Pure, no I/O.

Inputs: the confirmed (partition, offset) pairs of the producer, the endpoint's log of requests
(each a :class:`Delivery`, in the order the endpoint received them), the faults the scenario
injected (:class:`Fault`), the dead-lettered records, and optionally the partition ownership
timeline read from ZooKeeper (:class:`Owned`).

Definitions (the rules the chaos suite asserts; docs/RELIABILITY.md repeats them):

- *delivered*: the endpoint answered 2xx to a request for the record (``ok``). A request answered
  5xx, timed out or reset is an attempt, not a delivery.
- *lost*: confirmed by the broker, neither delivered nor dead-lettered. Must be 0.
- *duplicate*: every delivery of a record after its first. Each must be *explained*: its
  record's first delivery happened, on the same partition, inside the window of a fault that
  touched that partition, ``[fault.start - slack_s, fault.end]``. ``slack_s`` covers the
  acknowledgements a worker made but had not yet written to the offsets topic when the fault hit
  (2 offset-flush intervals plus the write itself); ``fault.end`` is when the scenario saw the
  partition deliver again after the fault was healed. A duplicate of a record first delivered
  outside every such window (steady state, or a fault elsewhere) is a bug.
- *order violation*: within one partition and key, first deliveries that do not come in offset
  order. Must be 0 (redeliveries may of course repeat older records).
- *max stall*: the longest gap between consecutive first deliveries of one partition, between
  the first and the last first delivery of the scenario. Reported, not asserted.
- *fencing violation* (only when the ownership timeline and the pusher of each request are
  known): a request from worker W for partition P received at a time W did not own P, with
  ``tolerance_s`` either side of each ownership interval for the latency of the timeline's watch.
  Where the timeline shows an epoch gap (owners it never saw), ownership is unknown and not judged.
  Must be 0: a worker that lost a partition (session expired, frozen, killed) never pushes it again
  until it owns it again with a new epoch.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Delivery:
    partition: int
    offset: int
    key: str | None
    at: float  # time.time() of receipt
    ok: bool  # answered 2xx
    pusher: str | None = None  # worker id, when known


@dataclass(frozen=True)
class Fault:
    kind: str
    start: float
    end: float
    partitions: frozenset[int] | None = None  # None: every partition


UNKNOWN_OWNER = "?"
"""The worker of an :class:`Owned` interval the timeline could not see (its watch missed owners that
came and went between two callbacks, as an epoch gap shows): any worker may have owned it then."""


@dataclass(frozen=True)
class Owned:
    """Worker ``worker`` owned ``partition`` from ``start`` until ``end`` (None: still at the end)."""

    partition: int
    worker: str
    start: float
    end: float | None


@dataclass
class Verdict:
    records: int
    deliveries: int
    faults: int
    lost: list[tuple[int, int]] = field(default_factory=list)
    duplicates: int = 0
    unexplained: list[tuple[int, int]] = field(default_factory=list)
    order_violations: list[str] = field(default_factory=list)
    max_stall_s: float = 0.0
    fencing_violations: list[str] = field(default_factory=list)
    dead_lettered: int = 0
    pushers_known: int = 0  # requests whose pusher was identified (the fencing check's reach)
    fencing_checked: bool = False

    def figures(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "deliveries": self.deliveries,
            "faults": self.faults,
            "lost": len(self.lost),
            "duplicates": self.duplicates,
            "unexplained_duplicates": len(self.unexplained),
            "order_violations": len(self.order_violations),
            "fencing_violations": len(self.fencing_violations) if self.fencing_checked else None,
            "dead_lettered": self.dead_lettered,
            "pushers_known": self.pushers_known,
            "max_stall_s": round(self.max_stall_s, 2),
        }

    def problems(self) -> list[str]:
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} lost records, e.g. {sorted(self.lost)[:5]}")
        if self.unexplained:
            out.append(f"{len(self.unexplained)} duplicates outside every fault window, e.g. {self.unexplained[:5]}")
        if self.order_violations:
            out.append(f"{len(self.order_violations)} order violations, e.g. {self.order_violations[:3]}")
        if self.fencing_violations:
            out.append(f"{len(self.fencing_violations)} fencing violations, e.g. {self.fencing_violations[:3]}")
        return out


def judge(
    produced: Iterable[tuple[int, int]],
    log: list[Delivery],
    faults: list[Fault],
    *,
    dead_lettered: Iterable[tuple[int, int]] = (),
    slack_s: float = 2.0,
    ownership: list[Owned] | None = None,
    tolerance_s: float = 0.5,
) -> Verdict:
    produced = set(produced)
    dead = set(dead_lettered)
    verdict = Verdict(records=len(produced), deliveries=sum(d.ok for d in log), faults=len(faults))
    verdict.dead_lettered = len(dead & produced)
    verdict.pushers_known = sum(d.pusher is not None for d in log)

    first: dict[tuple[int, int], Delivery] = {}
    copies: dict[tuple[int, int], int] = defaultdict(int)
    for d in log:
        if not d.ok:
            continue
        rec = (d.partition, d.offset)
        copies[rec] += 1
        first.setdefault(rec, d)
    verdict.lost = sorted(produced - set(first) - dead)

    for rec, n in copies.items():
        if n < 2:
            continue
        verdict.duplicates += n - 1
        if not any(_touches(f, rec[0], first[rec].at, slack_s) for f in faults):
            verdict.unexplained.append(rec)
    verdict.unexplained.sort()

    last_offset: dict[tuple[int, str | None], int] = {}
    by_partition: dict[int, list[float]] = defaultdict(list)
    for d in sorted(first.values(), key=lambda d: d.at):
        k = (d.partition, d.key)
        prev = last_offset.get(k)
        if prev is not None and d.offset < prev:
            verdict.order_violations.append(f"partition {d.partition} key {d.key}: offset {d.offset} after {prev}")
        last_offset[k] = d.offset if prev is None else max(prev, d.offset)
        by_partition[d.partition].append(d.at)
    verdict.max_stall_s = max(
        (b - a for times in by_partition.values() for a, b in itertools.pairwise(times)), default=0.0
    )

    if ownership is not None:
        verdict.fencing_checked = True
        verdict.fencing_violations = fencing(log, ownership, tolerance_s)
    return verdict


def _touches(f: Fault, partition: int, at: float, slack_s: float) -> bool:
    return (f.partitions is None or partition in f.partitions) and f.start - slack_s <= at <= f.end


def fencing(log: list[Delivery], ownership: list[Owned], tolerance_s: float) -> list[str]:
    """Requests (any answer) pushed by a worker outside its ownership of the partition."""
    spans: dict[tuple[int, str], list[Owned]] = defaultdict(list)
    for o in ownership:
        spans[(o.partition, o.worker)].append(o)
    out = []
    for d in log:
        if d.pusher is None:
            continue
        owned = spans.get((d.partition, d.pusher), []) + spans.get((d.partition, UNKNOWN_OWNER), [])
        if not any(
            o.start - tolerance_s <= d.at <= (o.end if o.end is not None else d.at) + tolerance_s for o in owned
        ):
            out.append(f"{d.pusher} pushed partition {d.partition} offset {d.offset} at {d.at:.3f} without owning it")
    return out
