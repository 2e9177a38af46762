"""Ordering window: which fetched records of one partition may be pushed now.

Use case: a partition holds many keys; ``ordering=key`` must deliver the records of one key one
at a time in offset order while different keys go concurrently, all within ``max_in_flight``
unacknowledged deliveries per partition. A record waiting for its retry stays in flight for its
key, so it holds back later records of that key only, never other keys.

Under ``key`` and ``partition`` each record maps to a *lane*: its key (``key``; a null key is its
own lane, since Kafka gives null-keyed records no order) or the one partition lane
(``partition``). A lane is busy while one of its records is in flight. Ready lanes are served
first come first served. ``none`` keeps no lanes: its records wait in one FIFO, in offset order,
which is never busy: they go as ``max_in_flight`` allows (:meth:`lane` still names each record
its own lane, for the retry logic). Pure: no I/O, no clock.

Batch push mode takes *batches* (:meth:`take_batch`): a lane gives a batch every record it has
queued, in offset order, within the batch's limits, and stays busy until all of them finish; so
with ``key`` a batch may carry several records of one key (array order = offset order) and the
next records of that key wait for the whole group. ``none`` fills a batch from its FIFO.

A reconfigure re-lanes the pending records; in-flight ones finish under the lane they were taken
with (a key or partition lane stays busy until they do; records taken under ``none`` hold nothing).

States of a record: pending (in its lane's queue, or the FIFO) → in flight (taken) → finished
(acked or dead-lettered). :meth:`clear` drops every pending record (release, fence).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from itertools import chain, islice, repeat, starmap
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

ORDERINGS = ("key", "partition", "none")


class HasOffset(Protocol):
    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...


R = TypeVar("R", bound=HasOffset)
T = TypeVar("T")

_offset = attrgetter("offset")

# Lanes: a key's bytes (``key``), the offset itself (null keys under ``key``), or this one object
# (``partition``). bytes, ints and a tuple never compare equal, so no tuple per record is needed
# to keep them apart.
_PARTITION_LANE = ("partition",)
# What a record taken under ``none`` is in flight under: a lane no queue, ready entry or busy count
# ever has, so finishing it only forgets it.
_FREE_LANE = ("none",)


def _pop_left(queue: deque[T], n: int) -> list[T]:
    """The first ``n`` items of ``queue``, removed (one C-level pass instead of a Python loop)."""
    if n == len(queue):
        out = list(queue)
        queue.clear()
        return out
    return list(starmap(queue.popleft, repeat((), n)))


class Window(Generic[R]):
    def __init__(self, ordering: str, max_in_flight: int) -> None:
        if ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.ordering = ordering
        self.max_in_flight = max_in_flight
        self._lanes: dict[Hashable, deque[R]] = {}
        self._ready: deque[Hashable] = deque()
        # Lane -> how many of its records are in flight (more than one only in batch mode).
        self._busy: dict[Hashable, int] = {}
        # The lane each in-flight record was taken under (it may differ after a reconfigure).
        self._taken: dict[int, Hashable] = {}
        # ``none``: every pending record, in offset order (then ``_lanes`` and ``_ready`` are empty;
        # otherwise this is). Records of ``none`` have no order to keep, so they need no lanes.
        self._free: deque[R] = deque()
        self.pending = 0

    def reconfigure(self, ordering: str, max_in_flight: int) -> None:
        """Apply an edited subscription: pending records are re-laned; in-flight ones finish as they are."""
        if ordering not in ORDERINGS or max_in_flight < 1:
            raise ValueError(f"invalid ordering {ordering!r} or max_in_flight {max_in_flight}")
        items = self.clear()
        self.ordering = ordering
        self.max_in_flight = max_in_flight
        for item in items:
            self.add(item)

    def lane(self, item: R) -> Hashable:
        """The records a retried ``item`` holds back are those of its lane: its key (its offset for a
        null key), every record (``partition``), or none but itself (``none``: its offset)."""
        if self.ordering == "partition":
            return _PARTITION_LANE
        if self.ordering == "key" and item.key is not None:
            return item.key
        return item.offset

    def add(self, item: R) -> None:
        """A fetched record, in offset order."""
        self.pending += 1
        if self.ordering == "none":
            self._free.append(item)
            return
        lane = self.lane(item)
        queue = self._lanes.get(lane)
        if queue is None:
            queue = self._lanes[lane] = deque()
            if lane not in self._busy:
                self._ready.append(lane)
        queue.append(item)

    def add_many(self, items: list[R]) -> None:
        """Fetched records, in offset order: :meth:`add` for each, in one pass (the fetch path)."""
        if self.ordering == "none":
            self._free.extend(items)
            self.pending += len(items)
            return
        if self.ordering == "partition":
            queue = self._lanes.get(_PARTITION_LANE)
            if queue is None:
                queue = self._lanes[_PARTITION_LANE] = deque()
                if _PARTITION_LANE not in self._busy:
                    self._ready.append(_PARTITION_LANE)
            queue.extend(items)
            self.pending += len(items)
            return
        lanes, busy, ready = self._lanes, self._busy, self._ready
        get = lanes.get
        for item in items:
            lane: Hashable = item.key
            if lane is None:
                lane = item.offset
            q = get(lane)
            if q is None:
                q = lanes[lane] = deque()
                if lane not in busy:
                    ready.append(lane)
            q.append(item)
        self.pending += len(items)

    def take(self) -> list[R]:
        """Records that may start now; each is in flight until :meth:`finish`."""
        if self.ordering == "none":
            return self._take_free(self.max_in_flight - len(self._taken))
        out: list[R] = []
        while self._ready and self.in_flight < self.max_in_flight:
            lane = self._ready.popleft()
            queue = self._lanes[lane]
            item = queue.popleft()
            if not queue:
                del self._lanes[lane]
            self._busy[lane] = 1
            self._taken[item.offset] = lane
            self.pending -= 1
            out.append(item)
        return out

    def take_batch(
        self, max_records: int, max_bytes: int, size: Callable[[R], int], raw_size: Callable[[R], int] | None = None
    ) -> list[R]:
        """One batch that may start now, in offset order: whole runs of ready lanes (``none``: the
        waiting records) until ``max_records``, ``max_bytes`` (by ``size``) or ``max_in_flight`` is
        reached. A record larger than ``max_bytes`` goes alone. Empty when nothing is ready. Every
        record is in flight until :meth:`finish`; its lane stays busy until the last of them finishes.

        ``raw_size``, when given, is a cheap bound such that ``size(r) <= 3 * raw_size(r) + 128``:
        a batch that fits by that bound is taken without calling ``size`` per record (the common
        case of small records and a large ``max_bytes``); near ``max_bytes`` the exact sizes
        decide, so the batches are the same either way.
        """
        room = min(max_records, self.max_in_flight - len(self._taken))
        if room <= 0:
            return []
        if self.ordering == "none":
            free = self._free
            n = min(room, len(free))
            return self._take_free(_fitting(free, n, max_bytes, size, raw_size))
        ready, lanes = self._ready, self._lanes
        if not ready:
            return []
        out: list[R] = []
        took: list[Hashable] = []
        counts: list[int] = []
        # The candidates: the ready lanes' runs in turn, up to `room` records. They are looked at
        # first and taken after, so that the bound of all of them is one sum, not one per lane.
        for lane in ready:
            queue = lanes[lane]
            n = min(len(queue), room - len(out))
            out += queue if n == len(queue) else islice(queue, n)
            took.append(lane)
            counts.append(n)
            if len(out) == room:
                break
        drop = len(out) - _fitting(out, len(out), max_bytes, size, raw_size)
        if drop:
            # Full by bytes: the batch ends inside a lane (it is partly taken) or where one begins
            # (that one stays ready and starts the next batch).
            del out[-drop:]
            while drop >= counts[-1]:
                drop -= counts.pop()
                took.pop()
            counts[-1] -= drop
        several = len(took) > 1
        # Each record's lane, for finish(): one C-level pass over the batch.
        of_lane = chain.from_iterable(map(repeat, took, counts)) if several else repeat(took[0])
        self._taken.update(zip(map(_offset, out), of_lane, strict=False))
        self._busy.update(zip(took, counts, strict=True))
        self.pending -= len(out)
        _pop_left(ready, len(took))
        last = lanes[took[-1]]
        if counts[-1] < len(last):
            # Partly taken: the rest waits until these finish (finish() makes the lane ready again).
            _pop_left(last, counts[-1])
            took.pop()
        for lane in took:
            del lanes[lane]
        if several:
            # Offset order overall (so per lane too): the acks then come back as contiguous runs.
            out.sort(key=_offset)
        return out

    def take_due(self, due_ms: Callable[[R], float], now_ms: float) -> tuple[list[R], float | None]:
        """``ordering none`` only: like :meth:`take`, but the waiting records start in offset order
        and only those with ``due_ms(record) <= now_ms``; also the due time of the first one held
        back (None when none is). For records whose due times rise with their offsets (a delay
        level, a constant consumer delay), so the head is always the next due."""
        n = self.max_in_flight - len(self._taken)
        free = self._free
        out: list[R] = []
        while free and len(out) < n:
            head_due = due_ms(free[0])
            if head_due > now_ms:
                break
            out.append(free.popleft())
        self._taken.update(zip(map(_offset, out), repeat(_FREE_LANE)))
        self.pending -= len(out)
        held = due_ms(free[0]) if free and len(out) < n else None
        return out, held

    def _take_free(self, n: int) -> list[R]:
        if n <= 0 or not self._free:
            return []
        out = _pop_left(self._free, min(n, len(self._free)))
        self._taken.update(zip(map(_offset, out), repeat(_FREE_LANE)))
        self.pending -= len(out)
        return out

    def finish(self, item: R) -> None:
        """The record is acknowledged or dead-lettered: its lane may go on."""
        lane = self._taken.pop(item.offset, None)
        if lane is None or lane is _FREE_LANE:
            return
        left = self._busy.get(lane, 1) - 1
        if left > 0:
            self._busy[lane] = left
            return
        self._busy.pop(lane, None)
        if lane in self._lanes:
            self._ready.append(lane)

    def finish_offsets(self, offsets: Iterable[int]) -> None:
        """:meth:`finish` for the in-flight records at ``offsets``, counted per lane (a batch's acks)."""
        taken = list(map(self._taken.pop, offsets, repeat(None)))
        busy = self._busy
        if not busy:
            return  # only records of ``none`` were in flight: forgetting them is all
        counts = Counter(taken)
        lanes, ready = self._lanes, self._ready
        # In the order of each lane's last record, as finish() one by one would make them ready.
        for lane in reversed(dict.fromkeys(reversed(taken))):
            if lane is None or lane is _FREE_LANE:
                continue
            n = counts[lane]
            left = busy.get(lane, 1) - n
            if left > 0:
                busy[lane] = left
                continue
            busy.pop(lane, None)
            if lane in lanes:
                ready.append(lane)

    @property
    def in_flight(self) -> int:
        return len(self._taken)

    def clear(self) -> list[R]:
        """Drop every pending record (they stay unacknowledged) and return them in offset order."""
        items = sorted(chain(self._free, *self._lanes.values()), key=_offset)
        self._free.clear()
        self._lanes.clear()
        self._ready.clear()
        self.pending = 0
        return items


def _fitting(
    queue: deque[R] | list[R], n: int, max_bytes: int, size: Callable[[R], int], raw_size: Callable[[R], int] | None
) -> int:
    """How many of the first ``n`` records of ``queue`` fit in ``max_bytes`` (at least one): all of
    them when the cheap bound says so, else as many as their exact sizes allow, in order."""
    head = queue if n == len(queue) else islice(queue, n)
    if raw_size is not None and 3 * sum(map(raw_size, head)) + 128 * n <= max_bytes:
        return n
    used = 0
    for i, item in enumerate(queue if n == len(queue) else islice(queue, n)):
        used += size(item)
        if i and used > max_bytes:
            return i
    return n
