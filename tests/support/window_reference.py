"""The ordering window as it was before ``none`` got one FIFO and ``take_batch`` its bulk paths
(worker/window.py at commit 20675db, unchanged but for the class name): the oracle of the
differential tests in tests/unit/test_window.py. Not used by the worker.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from itertools import islice, repeat
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

ORDERINGS = ("key", "partition", "none")


class HasOffset(Protocol):
    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...


R = TypeVar("R", bound=HasOffset)

_offset = attrgetter("offset")

# Lanes: a key's bytes (``key``), the offset itself (``none``, and null keys under ``key``), or
# this one object (``partition``). bytes, ints and a tuple never compare equal, so no tuple per
# record is needed to keep them apart.
_PARTITION_LANE = ("partition",)


class ReferenceWindow(Generic[R]):
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
        if self.ordering == "partition":
            return _PARTITION_LANE
        if self.ordering == "key" and item.key is not None:
            return item.key
        return item.offset

    def add(self, item: R) -> None:
        """A fetched record, in offset order."""
        lane = self.lane(item)
        queue = self._lanes.get(lane)
        if queue is None:
            queue = self._lanes[lane] = deque()
            if lane not in self._busy:
                self._ready.append(lane)
        queue.append(item)
        self.pending += 1

    def add_many(self, items: list[R]) -> None:
        """Fetched records, in offset order: :meth:`add` for each, in one pass (the fetch path)."""
        if self.ordering == "partition":
            queue = self._lanes.get(_PARTITION_LANE)
            if queue is None:
                queue = self._lanes[_PARTITION_LANE] = deque()
                if _PARTITION_LANE not in self._busy:
                    self._ready.append(_PARTITION_LANE)
            queue.extend(items)
            self.pending += len(items)
            return
        by_key = self.ordering == "key"
        lanes, busy, ready = self._lanes, self._busy, self._ready
        get = lanes.get
        for item in items:
            lane: Hashable = item.key if by_key else None
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
        """One batch that may start now, in offset order: whole runs of ready lanes until
        ``max_records``, ``max_bytes`` (by ``size``) or ``max_in_flight`` is reached. A record larger
        than ``max_bytes`` goes alone. Empty when nothing is ready. Every record is in flight until
        :meth:`finish`; its lane stays busy until the last of them finishes.

        ``raw_size``, when given, is a cheap bound such that ``size(r) <= 3 * raw_size(r) + 128``:
        a lane's run of records that fits by that bound is taken without calling ``size`` per
        record (the common case of small records and a large ``max_bytes``); near ``max_bytes``
        the exact sizes decide, so the batches are the same either way.
        """
        out: list[R] = []
        room = min(max_records, self.max_in_flight - len(self._taken))
        used = count = 0
        exact = True  # whether `used` is the exact sum of `size`, or only an upper bound
        ready, lanes, taken, busy = self._ready, self._lanes, self._taken, self._busy
        while ready and count < room:
            lane = ready.popleft()
            queue = lanes[lane]
            if raw_size is not None:
                n = min(len(queue), room - count)
                run = list(queue) if n == len(queue) else list(islice(queue, n))
                bound = 3 * sum(map(raw_size, run)) + 128 * n
                if used + bound <= max_bytes:
                    out += run
                    taken.update(zip(map(_offset, run), repeat(lane)))
                    used += bound
                    exact = False
                    count += n
                    busy[lane] = n
                    self.pending -= n
                    if n < len(queue):
                        for _ in range(n):
                            queue.popleft()
                        break  # partly taken: as below
                    del lanes[lane]
                    continue
            if not exact:
                used = sum(map(size, out))
                exact = True
            n = 0
            while queue and count < room:
                item = queue[0]
                s = size(item)
                if count and used + s > max_bytes:
                    break
                queue.popleft()
                used += s
                taken[item.offset] = lane
                out.append(item)
                n += 1
                count += 1
            if n == 0:
                ready.appendleft(lane)  # the batch is full by bytes; this lane starts the next one
                break
            busy[lane] = n
            self.pending -= n
            if queue:
                break  # partly taken: the rest waits until these finish (finish() makes it ready again)
            del lanes[lane]
        if len(out) > 1:
            # Offset order overall (so per lane too): the acks then come back as contiguous runs.
            out.sort(key=_offset)
        return out

    def finish(self, item: R) -> None:
        """The record is acknowledged or dead-lettered: its lane may go on."""
        lane = self._taken.pop(item.offset, None)
        if lane is None:
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
        counts = Counter(taken)
        busy, lanes, ready = self._busy, self._lanes, self._ready
        # In the order of each lane's last record, as finish() one by one would make them ready.
        for lane in reversed(dict.fromkeys(reversed(taken))):
            if lane is None:
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
        items = sorted((i for q in self._lanes.values() for i in q), key=lambda i: i.offset)
        self._lanes.clear()
        self._ready.clear()
        self.pending = 0
        return items
