"""A naive model of the ordering window (worker/window.py): the oracle of the differential tests
in tests/unit/test_window.py.

It keeps what the window promises and nothing of how the window makes it fast: plain lists, one
record at a time, exact sizes always (no cheap bound), no bulk paths. The rules, as docs state
them: a record's lane is its key (``key``; its offset for a null key), the one partition lane
(``partition``), or nothing (``none``: one queue in offset order). A lane is busy while any record
taken from it is in flight; lanes become ready in the order they got a waiting record while idle,
or went idle with records waiting; ready lanes are served first come first served. A batch takes
whole runs of ready lanes (``none``: the queue) within the limits; a record larger than the byte
limit goes alone; a lane cut by the byte limit stays busy and waits. Not used by the worker.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

R = TypeVar("R")
NONE_LANE = ("none",)
PARTITION_LANE = ("partition",)


class ModelWindow(Generic[R]):
    def __init__(self, ordering: str, max_in_flight: int) -> None:
        self.ordering, self.max_in_flight = ordering, max_in_flight
        self.waiting: list[R] = []  # every pending record, in the order added
        self.ready: list[Hashable] = []  # lanes with waiting records and nothing in flight
        self.taken: dict[int, Hashable] = {}  # in-flight offset -> the lane it was taken under

    def lane(self, r: Any) -> Hashable:
        if self.ordering == "partition":
            return PARTITION_LANE
        if self.ordering == "key" and r.key is not None:
            return r.key  # type: ignore[no-any-return]
        return r.offset  # type: ignore[no-any-return]

    def _lane_of_waiting(self, r: Any) -> Hashable:
        return NONE_LANE if self.ordering == "none" else self.lane(r)

    def _busy(self, lane: Hashable) -> bool:
        return lane in self.taken.values()

    def _waits(self, lane: Hashable) -> list[R]:
        return [r for r in self.waiting if self._lane_of_waiting(r) == lane]

    @property
    def pending(self) -> int:
        return len(self.waiting)

    @property
    def in_flight(self) -> int:
        return len(self.taken)

    def add(self, r: R) -> None:
        lane = self._lane_of_waiting(r)
        if self.ordering != "none" and not self._waits(lane) and not self._busy(lane):
            self.ready.append(lane)
        self.waiting.append(r)

    def add_many(self, records: Iterable[R]) -> None:
        for r in records:
            self.add(r)

    def _start(self, r: Any, lane: Hashable) -> None:
        self.waiting.remove(r)
        self.taken[r.offset] = lane

    def take(self) -> list[R]:
        out: list[R] = []
        if self.ordering == "none":
            while self.waiting and self.in_flight < self.max_in_flight:
                out.append(self.waiting[0])
                self._start(self.waiting[0], NONE_LANE)
            return out
        while self.ready and self.in_flight < self.max_in_flight:
            lane = self.ready.pop(0)
            first = self._waits(lane)[0]
            self._start(first, lane)
            out.append(first)
        return out

    def take_batch(
        self, max_records: int, max_bytes: int, size: Callable[[R], int], raw_size: Callable[[R], int] | None = None
    ) -> list[R]:
        room = min(max_records, self.max_in_flight - self.in_flight)
        if room <= 0:
            return []
        lanes = [NONE_LANE] if self.ordering == "none" else list(self.ready)
        candidates: list[tuple[R, Hashable]] = []
        for lane in lanes:
            for r in self._waits(lane):
                if len(candidates) < room:
                    candidates.append((r, lane))
        used, batch = 0, []
        for i, (r, lane) in enumerate(candidates):
            used += size(r)
            if i and used > max_bytes:
                break
            batch.append((r, lane))
        for r, lane in batch:
            self._start(r, lane)
        if self.ordering != "none":
            for lane in dict.fromkeys(lane for _, lane in batch):
                self.ready.remove(lane)  # busy now; a rest of its run waits for the whole batch
        return sorted((r for r, _ in batch), key=lambda r: r.offset)  # type: ignore[attr-defined]

    def finish(self, r: Any) -> None:
        self.finish_offsets([r.offset])

    def finish_offsets(self, offsets: Iterable[int]) -> None:
        done = [(o, self.taken.pop(o)) for o in offsets if o in self.taken]
        # Lanes that went idle, in the order of their last finished record.
        last: dict[Hashable, int] = {}
        for i, (_, lane) in enumerate(done):
            last[lane] = i
        for lane in sorted(last, key=last.__getitem__):
            if lane is not NONE_LANE and not self._busy(lane) and self._waits(lane):
                self.ready.append(lane)

    def reconfigure(self, ordering: str, max_in_flight: int) -> None:
        records = self.clear()
        self.ordering, self.max_in_flight = ordering, max_in_flight
        self.add_many(records)

    def clear(self) -> list[R]:
        records = sorted(self.waiting, key=lambda r: r.offset)  # type: ignore[attr-defined]
        self.waiting, self.ready = [], []
        return records
