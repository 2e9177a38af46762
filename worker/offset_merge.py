"""Offset merge: out-of-order acknowledgements in, a committed watermark and acked ranges out.

Use case: a partition pushes many records concurrently, so acks arrive out of order. Kafka's
group offset can only say "everything below N is done"; everything acked above the first gap
would be redelivered after a move. The merge keeps both halves of the truth:

- ``committed``: every offset below it is acknowledged (or dead-lettered, or does not exist);
- ``acked``: sorted, disjoint, non-adjacent half-open ranges above ``committed``.

Its state is what the offsets topic stores (docs/contract.md §5), so a new owner restores it and
skips what was already acknowledged. The state grows with the number of gaps, never with the
window. Pure: no I/O, no clock.

Cost: an ack is O(1). Single acks above the watermark go into a set (one hash insert); when the
ack at the watermark arrives, the watermark walks up through the set and the ranges, and every
offset is walked over once. The set is folded into the sorted range lists only when someone
asks for the ranges (a state write, ``gaps``), when a range is acknowledged, or when it grows
past ``FOLD_AT`` offsets, so memory stays proportional to the gaps even when the head of the
partition is stuck for a long time (one record in retries while thousands above it are acked).

Offsets that do not exist in the log (compacted topics, transaction markers) are acknowledged
as a range by the fetcher with :meth:`ack_range`, so the watermark never waits on them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

FOLD_AT = 4096
"""Single acks kept unfolded at most; past this they are folded into ranges (amortised O(log n))."""
SHORT_RANGE = 16
"""Ranges up to this long are acknowledged offset by offset."""


class OffsetMerge:
    __slots__ = ("_his", "_los", "_singles", "committed")

    def __init__(self, committed: int = 0, acked: tuple[tuple[int, int], ...] | list[tuple[int, int]] = ()) -> None:
        self.committed = committed
        # Sorted, disjoint, non-adjacent half-open ranges above the watermark, as two parallel lists.
        self._los: list[int] = []
        self._his: list[int] = []
        # Offsets acknowledged one by one above the watermark, not yet folded into the ranges.
        self._singles: set[int] = set()
        for lo, hi in acked:
            self.ack_range(lo, hi)

    def ack(self, offset: int) -> None:
        """Acknowledge one offset. Acknowledging twice is harmless."""
        committed = self.committed
        if offset != committed:
            if offset > committed:
                singles = self._singles
                singles.add(offset)
                if len(singles) > FOLD_AT:
                    self._fold()
            return
        if not self._singles and not self._los:  # in order, nothing above: the common case
            self.committed = committed + 1
            return
        self._advance(committed + 1)

    def ack_many(self, offsets: list[int]) -> None:
        """Acknowledge every offset of a batch (ascending, no repeats: what a batch carries).

        Same result as :meth:`ack` for each, with the per-offset work in C: a contiguous run at the
        watermark moves it in one step; anything else is one set update.
        """
        if not offsets:
            return
        committed = self.committed
        first, last = offsets[0], offsets[-1]
        if first == committed and last - first + 1 == len(offsets):
            self._advance(last + 1)
            return
        if first < committed:
            offsets = [o for o in offsets if o >= committed]
        singles = self._singles
        singles.update(offsets)
        if committed in singles:
            self._advance(committed)
        elif len(singles) > FOLD_AT:
            self._fold()

    def _advance(self, committed: int) -> None:
        """Everything below ``committed`` is acknowledged: walk up through the single acks and ranges."""
        singles = self._singles
        los = self._los
        while True:
            while committed in singles:
                singles.remove(committed)
                committed += 1
            if los and los[0] <= committed:
                his = self._his
                committed = max(committed, his[0])
                del los[0]
                del his[0]
                continue
            break
        self.committed = committed
        if len(singles) > FOLD_AT:
            self._fold()

    def ack_range(self, lo: int, hi: int) -> None:
        """Acknowledge the half-open range [lo, hi)."""
        if hi <= self.committed or hi <= lo:
            return
        if hi - lo <= SHORT_RANGE:
            # A short run (a batch's acks of a few keys): one O(1) ack each beats folding the set.
            for offset in range(max(lo, self.committed), hi):
                self.ack(offset)
            return
        self._fold()
        self._insert(max(lo, self.committed), hi)
        los, his = self._los, self._his
        if los[0] <= self.committed:
            self.committed = his[0]
            del los[0]
            del his[0]

    def _insert(self, lo: int, hi: int) -> None:
        """Put [lo, hi) into the range lists; ranges that overlap or touch it merge with it."""
        los, his = self._los, self._his
        i = bisect_left(his, lo)
        j = bisect_right(los, hi)
        if i < j:
            lo = min(lo, los[i])
            hi = max(hi, his[j - 1])
            del los[i:j]
            del his[i:j]
        los.insert(i, lo)
        his.insert(i, hi)

    def _fold(self) -> None:
        """Move the single acks into the range lists, as runs of consecutive offsets."""
        singles = self._singles
        if not singles:
            return
        # A duplicate ack inside a range stays in the set when the watermark jumps over that range.
        committed = self.committed
        offsets = sorted(o for o in singles if o > committed)
        singles.clear()
        if not offsets:
            return
        runs: list[tuple[int, int]] = []
        lo = prev = offsets[0]
        for o in offsets[1:]:
            if o != prev + 1:
                runs.append((lo, prev + 1))
                lo = o
            prev = o
        runs.append((lo, prev + 1))
        if not self._los:
            self._los = [lo for lo, _ in runs]
            self._his = [hi for _, hi in runs]
            return
        if len(runs) * 8 < len(self._los):
            for lo, hi in runs:
                self._insert(lo, hi)
            return
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted([*zip(self._los, self._his, strict=True), *runs]):
            if merged and lo <= merged[-1][1]:
                if hi > merged[-1][1]:
                    merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        self._los = [lo for lo, _ in merged]
        self._his = [hi for _, hi in merged]

    def is_acked(self, offset: int) -> bool:
        if offset < self.committed or offset in self._singles:
            return True
        i = bisect_right(self._los, offset) - 1
        return i >= 0 and offset < self._his[i]

    def skip_to(self, offset: int) -> int:
        """The first offset at or after ``offset`` that is not acknowledged (where a fetch resumes)."""
        self._fold()
        if offset < self.committed:
            offset = self.committed
        i = bisect_right(self._los, offset) - 1
        if i >= 0 and offset < self._his[i]:
            return self._his[i]
        return offset

    @property
    def acked(self) -> tuple[tuple[int, int], ...]:
        self._fold()
        return tuple(zip(self._los, self._his, strict=True))

    @property
    def gaps(self) -> int:
        """Number of acked ranges above the watermark (how out-of-order the endpoint is)."""
        self._fold()
        return len(self._los)

    @property
    def acked_above(self) -> int:
        """How many offsets above the watermark are acknowledged (what a prefix-only commit would redeliver)."""
        self._fold()
        return sum(hi - lo for lo, hi in zip(self._los, self._his, strict=True))

    def __repr__(self) -> str:
        return f"OffsetMerge(committed={self.committed}, acked={list(self.acked)})"
