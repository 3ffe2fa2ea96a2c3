"""A range of minutes as a few signed pieces of the minute, hour and day tables, so that reading any lookback
costs a bounded number of rows per group however many minutes it spans.

Each edge snaps to the nearest whole coarser unit: a range starting at 10:10 reads the hour 10:00 (one row) minus
the ten minutes 10:00–10:09; one starting at 10:50 reads the ten minutes 10:50–10:59. The newest edge of a lookback
snaps up (`open_end`): nothing is stored after the newest minute, so the subtracted future minutes cost nothing.
A 28-day window then reads at most 30 minutes + 12 hours + 28 days + 1 day per group. Pieces are canonical:
ranges ending at the same minute share their newest pieces. Integer sums keep the figures exact.
"""

from __future__ import annotations

from typing import NamedTuple

LEVELS: tuple[tuple[str, int], ...] = (("minute", 1), ("hour", 60), ("day", 1440))  # unit, minutes per unit


class Piece(NamedTuple):
    """The units lo <= u < hi of one table (`level` indexes LEVELS), added or (sign −1) subtracted (a tuple:
    hashed and sorted by the thousand per request)."""

    level: int
    lo: int
    hi: int
    sign: int = 1


def _nearest(value: int, size: int) -> int:
    return (value + size // 2) // size * size


def pieces(first: int, end: int, *, open_end: bool = False, level: int = 0) -> tuple[Piece, ...]:
    """Signed pieces whose sum is the units [first, end) of `level`."""
    if first >= end:
        return ()
    if level + 1 == len(LEVELS):
        return (Piece(level, first, end),)
    ratio = LEVELS[level + 1][1] // LEVELS[level][1]
    start = _nearest(first, ratio)
    stop = -(-end // ratio) * ratio if open_end else _nearest(end, ratio)
    if start >= stop:
        return (Piece(level, first, end),)
    out = []
    if first != start:
        out.append(Piece(level, min(first, start), max(first, start), 1 if first < start else -1))
    out.extend(pieces(start // ratio, stop // ratio, open_end=open_end, level=level + 1))
    if end != stop:
        out.append(Piece(level, min(end, stop), max(end, stop), 1 if stop < end else -1))
    return tuple(out)
