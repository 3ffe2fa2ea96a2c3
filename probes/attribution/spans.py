"""Interval arithmetic on sorted, disjoint (start, end) spans of integer nanoseconds."""

from __future__ import annotations

from collections.abc import Iterable

Span = tuple[int, int]


def union(spans: Iterable[Span]) -> list[Span]:
    """The spans merged: sorted, disjoint, empty ones dropped."""
    out: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def intersect(a: list[Span], b: list[Span]) -> list[Span]:
    """Where both sets of merged spans are."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Span], b: list[Span]) -> list[Span]:
    """Where merged spans `a` are and `b` is not."""
    out: list[Span] = []
    for start, end in a:
        cursor = start
        for bs, be in b:
            if be <= cursor or bs >= end:
                continue
            if bs > cursor:
                out.append((cursor, bs))
            cursor = max(cursor, be)
        if cursor < end:
            out.append((cursor, end))
    return out


def length(spans: Iterable[Span]) -> int:
    return sum(end - start for start, end in spans)
