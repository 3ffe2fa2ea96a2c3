"""One SLO group's minute buckets in fixed arrays, with running sums over each lookback.

A lookback of W minutes as of minute m covers the buckets m − W + 1 … m; "now" is the newest request minute
the group has seen (or a later stream time it was advanced to). Adding to a bucket and moving on cost O(number
of lookbacks) each, amortized: the figures are exact for late events whose bucket is still inside a lookback.
Requests of the current minute (nearly all of them) only add to a pending pair, folded into the arrays and every
running sum when the ring moves on or a late request arrives: the hot path is two additions whatever the number
of lookbacks (bench/slo.py (a)).
"""

from __future__ import annotations

from array import array


class GroupRing:
    """good/total per minute for the last `size` minutes, and good/total over each lookback."""

    __slots__ = ("lookbacks", "now", "_good", "_mins", "_pending_good", "_pending_total", "_size", "_sums", "_total")

    def __init__(self, size: int, lookbacks_m: tuple[int, ...], start: int):
        self._size = size
        self._good = array("q", bytes(8 * size))
        self._total = array("q", bytes(8 * size))
        self._mins = array("q", [-1]) * size
        self.lookbacks = lookbacks_m
        self._sums = [[0, 0] for _ in lookbacks_m]
        self.now = start
        self._pending_good = self._pending_total = 0  # of minute `now`, in no array or sum yet

    def _fold(self) -> None:
        """Put the pending counts of minute `now` into its bucket and every lookback's sum."""
        good, total = self._pending_good, self._pending_total
        if not total and not good:
            return
        self._pending_good = self._pending_total = 0
        self._count(self.now, good, total)

    def get(self, minute: int) -> tuple[int, int]:
        self._fold()
        slot = minute % self._size
        return (self._good[slot], self._total[slot]) if self._mins[slot] == minute else (0, 0)

    def add(self, minute: int, good: int, total: int) -> None:
        """Count into a minute's bucket (moving on first when it is newer than now)."""
        if minute == self.now:
            self._pending_good += good
            self._pending_total += total
            return
        self._fold()
        if minute > self.now:
            self.advance(minute)
        self._count(minute, good, total)

    def _count(self, minute: int, good: int, total: int) -> None:
        if minute <= self.now - self._size:
            return  # older than anything kept: only the stored buckets count it
        slot = minute % self._size
        if self._mins[slot] != minute:
            self._mins[slot], self._good[slot], self._total[slot] = minute, 0, 0
        self._good[slot] += good
        self._total[slot] += total
        if minute == self.now:  # the common case: in every lookback
            for sums in self._sums:
                sums[0] += good
                sums[1] += total
            return
        for sums, width in zip(self._sums, self.lookbacks, strict=True):
            if minute > self.now - width:
                sums[0] += good
                sums[1] += total

    def advance(self, minute: int) -> None:
        """Move now forward; buckets that leave a lookback are taken out of its sums."""
        if minute <= self.now:
            return
        self._fold()
        for sums, width in zip(self._sums, self.lookbacks, strict=True):
            if minute - self.now >= width:
                sums[0] = sums[1] = 0
                continue
            for leaving in range(self.now - width + 1, minute - width + 1):
                good, total = self.get(leaving)
                sums[0] -= good
                sums[1] -= total
        self.now = minute

    def lookback(self, index: int) -> tuple[int, int]:
        good, total = self._sums[index]
        return good + self._pending_good, total + self._pending_total

    def since(self, first: int) -> tuple[int, int]:
        """good/total of the buckets first … now (the budget's window; computed on demand)."""
        good = total = 0
        for minute in range(max(first, self.now - self._size + 1), self.now + 1):
            g, t = self.get(minute)
            good += g
            total += t
        return good, total
