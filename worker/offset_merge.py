"""Offset merge: out-of-order acknowledgements in, a committed watermark and acked ranges out.

Use case: a partition pushes many records concurrently, so acks arrive out of order. Kafka's
group offset can only say "everything below N is done"; everything acked above the first gap
would be redelivered after a move. The merge keeps both halves of the truth:

- ``committed``: every offset below it is acknowledged (or dead-lettered, or does not exist);
- ``acked``: sorted, disjoint, non-adjacent half-open ranges above ``committed``.

Its state is what the offsets topic stores (CONTRACT section 5), so a new owner restores it and
skips what was already acknowledged. The state grows with the number of gaps, never with the
window. Pure: no I/O, no clock. In-order acks (the common case) cost O(1); an out-of-order ack
costs a binary search plus a list insert over the gaps.

Offsets that do not exist in the log (compacted topics, transaction markers) are acknowledged
as a range by the fetcher with :meth:`ack_range`, so the watermark never waits on them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class OffsetMerge:
    __slots__ = ("_his", "_los", "committed")

    def __init__(self, committed: int = 0, acked: tuple[tuple[int, int], ...] | list[tuple[int, int]] = ()) -> None:
        self.committed = committed
        self._los: list[int] = []
        self._his: list[int] = []
        for lo, hi in acked:
            self.ack_range(lo, hi)

    def ack(self, offset: int) -> None:
        """Acknowledge one offset. Acknowledging twice is harmless."""
        los, his = self._los, self._his
        if offset == self.committed:
            if not los or offset + 1 < los[0]:
                self.committed = offset + 1
                return
        elif offset > self.committed and his:
            # Fast paths around the newest range, where most out-of-order acks land.
            last = his[-1]
            if offset == last:
                his[-1] = last + 1
                return
            if offset > last:
                los.append(offset)
                his.append(offset + 1)
                return
        self.ack_range(offset, offset + 1)

    def ack_range(self, lo: int, hi: int) -> None:
        """Acknowledge the half-open range [lo, hi)."""
        if hi <= self.committed or hi <= lo:
            return
        lo = max(lo, self.committed)
        los, his = self._los, self._his
        # Ranges that overlap or touch [lo, hi) merge with it.
        i = bisect_left(his, lo)
        j = bisect_right(los, hi)
        if i < j:
            lo = min(lo, los[i])
            hi = max(hi, his[j - 1])
            del los[i:j]
            del his[i:j]
        los.insert(i, lo)
        his.insert(i, hi)
        if los[0] <= self.committed:
            self.committed = his[0]
            del los[0]
            del his[0]

    def is_acked(self, offset: int) -> bool:
        if offset < self.committed:
            return True
        i = bisect_right(self._los, offset) - 1
        return i >= 0 and offset < self._his[i]

    def skip_to(self, offset: int) -> int:
        """The first offset at or after ``offset`` that is not acknowledged (where a fetch resumes)."""
        if offset < self.committed:
            offset = self.committed
        i = bisect_right(self._los, offset) - 1
        if i >= 0 and offset < self._his[i]:
            return self._his[i]
        return offset

    @property
    def acked(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._los, self._his, strict=True))

    @property
    def gaps(self) -> int:
        """Number of acked ranges above the watermark (how out-of-order the endpoint is)."""
        return len(self._los)

    @property
    def acked_above(self) -> int:
        """How many offsets above the watermark are acknowledged (what a prefix-only commit would redeliver)."""
        return sum(hi - lo for lo, hi in zip(self._los, self._his, strict=True))

    def __repr__(self) -> str:
        return f"OffsetMerge(committed={self.committed}, acked={list(self.acked)})"
