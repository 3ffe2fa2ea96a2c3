"""Stored events and violations → the JSON the charts draw (web/static/charts.js); pure functions, no I/O.

Every chart's numbers are also on the page as a table, so the page says the same without JavaScript.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuslo.engine.events import Event, format_time
from gpuslo.engine.metrics_signals import TOKEN_BUCKETS
from gpuslo.engine.store.charts import ViolationMark

# Bucket widths a time axis may use, smallest first; the first giving at most MAX_BINS bins wins.
_STEPS_S = (1, 5, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
MAX_BINS = 60
FR_HEALTHY = 0.35  # the design's fragmentation thresholds (docs/architecture.md)
FR_STALLS = 0.65
_GAP_ATTRS = ("itl_p50_ms", "itl_p99_ms", "itl_max_ms")


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


@dataclass(frozen=True)
class Bins:
    """Equal time bins from `start_ms`, each `step_s` wide."""

    start_ms: int
    step_s: int
    count: int

    @classmethod
    def spanning(cls, first: datetime, last: datetime) -> Bins:
        span = max((last - first).total_seconds(), 1.0)
        step = next((s for s in _STEPS_S if span / s <= MAX_BINS), _STEPS_S[-1])
        start = int(first.timestamp()) // step * step
        count = int((last.timestamp() - start) // step) + 1
        return cls(start * 1000, step, count)

    def index(self, moment: datetime) -> int:
        return min(max(int((_ms(moment) - self.start_ms) // (self.step_s * 1000)), 0), self.count - 1)

    def starts(self) -> list[int]:
        return [self.start_ms + i * self.step_s * 1000 for i in range(self.count)]


def severity_over_time(marks: Sequence[ViolationMark], severities: Sequence[str]) -> dict[str, Any]:
    """Violations opened per time bin and severity, for a stacked bar chart."""
    if not marks:
        return {"bins": [], "step_s": 0, "series": {}}
    bins = Bins.spanning(marks[0].first_seen, max(m.first_seen for m in marks))
    counts = {severity: [0] * bins.count for severity in severities}
    for mark in marks:
        counts.setdefault(mark.severity, [0] * bins.count)[bins.index(mark.first_seen)] += 1
    return {"bins": bins.starts(), "step_s": bins.step_s,
            "series": {severity: row for severity, row in counts.items() if any(row)}}


def gap_bucket_labels() -> list[str]:
    edges = [f"≤ {_gap_text(b)}" for b in TOKEN_BUCKETS]
    return [*edges, f"> {_gap_text(TOKEN_BUCKETS[-1])}"]


def _gap_text(seconds: float) -> str:
    return f"{seconds * 1000:g} ms" if seconds < 1 else f"{seconds:g} s"


def _gaps_of(event: Event) -> list[float]:
    """The inter-token gaps (seconds) an event reports; the same observations as gpuslo_token_latency_seconds."""
    names = _GAP_ATTRS if event.kind == "token_latency" else ("gap_ms",)
    values = (event.attrs.get(name) for name in names)
    return [v / 1000.0 for v in values if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0]


def token_series_key(event: Event) -> tuple[str, str, str, str]:
    gpu = "" if event.gpu is None else str(event.gpu)
    return (event.host, gpu, str(event.attrs.get("endpoint") or ""), str(event.attrs.get("model") or ""))


def token_heatmap(events: Sequence[Event], violations: Sequence[ViolationMark]) -> dict[str, Any]:
    """Time bin × gap bucket counts of reported gaps, stall markers at their gap and violation markers."""
    if not events:
        return {"bins": [], "buckets": gap_bucket_labels(), "cells": [], "stalls": [], "violations": [],
                "rows": []}
    bins = Bins.spanning(events[0].time, events[-1].time)
    cells: Counter[tuple[int, int]] = Counter()
    rows: dict[int, dict[str, Any]] = defaultdict(lambda: {"observations": 0, "stalls": 0, "max_gap_s": 0.0})
    stalls = []
    for event in events:
        column = bins.index(event.time)
        for gap in _gaps_of(event):
            bucket = bisect.bisect_left(TOKEN_BUCKETS, gap)
            cells[column, bucket] += 1
            row = rows[column]
            row["observations"] += 1
            row["max_gap_s"] = max(row["max_gap_s"], gap)
            if event.kind == "token_stall":
                row["stalls"] += 1
                stalls.append({"bin": column, "bucket": bucket, "gap_s": gap, "id": event.id,
                               "time": format_time(event.time)})
    starts = bins.starts()
    marks = [{"bin": bins.index(v.first_seen), "id": v.id, "rule": v.rule_id, "severity": v.severity}
             for v in violations if starts[0] <= _ms(v.first_seen) < starts[-1] + bins.step_s * 1000]
    table = [{"start": starts[i], **rows[i]} for i in sorted(rows)]
    return {"bins": starts, "step_s": bins.step_s, "buckets": gap_bucket_labels(),
            "cells": [[c, b, n] for (c, b), n in sorted(cells.items())], "stalls": stalls, "violations": marks,
            "rows": table}


def memory_timeline(samples: Iterable[Event], markers: Iterable[Event]) -> dict[str, Any]:
    """One GPU's fragmentation ratio, largest free block and free memory, with OOM, allocator-retry and stall
    markers (a retry is a rise of the allocator's alloc_retries: it flushed its cache and tried again)."""
    points = []
    retries = []
    previous: int | None = None
    for event in samples:
        attrs = event.attrs
        points.append({"t": _ms(event.time), "fr": attrs.get("fragmentation_ratio"),
                       "free": attrs.get("free_bytes"), "largest": attrs.get("largest_free_bytes"),
                       "scope": attrs.get("scope"), "id": event.id})
        count = attrs.get("alloc_retries")
        if isinstance(count, int) and previous is not None and count > previous:
            retries.append({"t": _ms(event.time), "kind": "allocator retry", "id": event.id,
                            "text": f"alloc_retries {previous} → {count}"})
        previous = count if isinstance(count, int) else previous
    marks = [*retries]
    for event in markers:
        label = {"cuda_oom": "OOM", "token_stall": "stall"}.get(event.kind, event.kind)
        marks.append({"t": _ms(event.time), "kind": label, "id": event.id, "text": _marker_text(event)})
    marks.sort(key=lambda m: m["t"])
    return {"points": points, "markers": marks, "thresholds": [FR_HEALTHY, FR_STALLS]}


def _marker_text(event: Event) -> str:
    if event.kind == "cuda_oom":
        requested = event.attrs.get("requested_bytes")
        return f"{event.attrs.get('api', '')} requested {requested} bytes".strip()
    if event.kind == "token_stall":
        return f"gap {event.attrs.get('gap_ms')} ms"
    return event.message or ""


def evidence_timeline(evidence: Sequence[Event]) -> dict[str, Any]:
    """A violation's evidence as points on a time line, one row per event kind."""
    kinds = sorted({e.kind for e in evidence})
    points = [{"t": _ms(e.time), "row": kinds.index(e.kind), "id": e.id, "kind": e.kind,
               "host": e.host, "gpu": e.gpu} for e in evidence]
    return {"kinds": kinds, "points": points}


_ATTRIBUTION = re.compile(r"attribution\.(\w+)_ms")


def stall_attribution(evidence: Sequence[Event]) -> dict[str, Any] | None:
    """Each attributed token_stall of the evidence split by layer (`attribution.<layer>_ms` attributes, as the
    attribution probe writes them), for a stacked bar; None when no stall carries an attribution."""
    stalls = [e for e in evidence if e.kind == "token_stall"
              and any(_ATTRIBUTION.fullmatch(key) for key in e.attrs)]
    if not stalls:
        return None
    layers: list[str] = []
    for event in stalls:
        for key in event.attrs:
            found = _ATTRIBUTION.fullmatch(key)
            if found and found.group(1) not in layers:
                layers.append(found.group(1))
    series = {layer: [_number(e.attrs.get(f"attribution.{layer}_ms")) for e in stalls] for layer in layers}
    return {"stalls": [{"id": e.id, "t": _ms(e.time), "gap_ms": _number(e.attrs.get("gap_ms")),
                        "dominant": e.attrs.get("attribution.dominant")} for e in stalls],
            "layers": layers, "series": series}


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
