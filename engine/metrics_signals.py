"""Metrics read off accepted events: the token-latency histogram and the allocator's fragmentation gauges.

Their labels come from probes (host, GPU, endpoint, model), so each label keeps at most `cap` distinct values and
later ones are counted under "other": a fleet that grows cannot grow the series count without bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from gpuslo.engine.events import Event
from gpuslo.engine.metrics_batch import BatchHistogram, LatestGauges

OTHER = "other"
NONE = ""  # an event without a GPU (or endpoint, model) is labelled with the empty value
LABEL_CAP = 64
# Inter-token gaps from 10 ms (a fast decode step) to 5 s (a hung stream); the 0.25 s bucket edge is the token
# rules' default stall threshold.
TOKEN_BUCKETS = (0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0, 1.5, 2.5, 5.0)
_GAP_ATTRS = ("itl_p50_ms", "itl_p99_ms", "itl_max_ms")
_NUMBER = (int, float)  # a tuple: isinstance with it is faster than with `int | float` on the hot path
_CHILD_CACHE = 4096  # raw label tuples remembered with their series (beyond it, values are looked up each time)
_MEMORY_ATTRS = ("fragmentation_ratio", "free_bytes", "largest_free_bytes")


class BoundedLabels:
    """Maps label values to themselves until a label has `cap` distinct values, then to "other"."""

    def __init__(self, cap: int = LABEL_CAP):
        self.cap = cap
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def value(self, label: str, raw: object) -> str:
        text = NONE if raw is None else str(raw)[:200]
        with self._lock:
            seen = self._seen.setdefault(label, set())
            if text in seen:
                return text
            if len(seen) >= self.cap:
                return OTHER
            seen.add(text)
            return text


class SignalMetrics:
    """Token gaps, stalls and fragmentation per host/GPU (and endpoint/model for tokens), from accepted events."""

    def __init__(self, registry: CollectorRegistry, cap: int = LABEL_CAP):
        self.labels = BoundedLabels(cap)
        token_labels = ["host", "gpu", "endpoint", "model"]
        self.token_latency = BatchHistogram(
            "gpuslo_token_latency_seconds",
            "Inter-token gaps reported by token probes: each token_latency window's p50, p99 and max gap and "
            "every token_stall gap.",
            token_labels, TOKEN_BUCKETS, registry)
        self.token_stalls = Counter(
            "gpuslo_token_stalls", "token_stall events (gaps over the probe's stall threshold).", token_labels,
            registry=registry)
        self.memory = LatestGauges((
            ("gpuslo_fragmentation_ratio",
             "Latest fragmentation ratio (free - largest free block) / free per host, GPU and scope."),
            ("gpuslo_memory_free_bytes", "Latest free memory the fragmentation ratio is taken over."),
            ("gpuslo_memory_largest_free_block_bytes", "Latest largest free block."),
        ), ["host", "gpu", "scope"], registry)
        # Raw (host, gpu, endpoint, model) or (host, gpu, scope) → that series' children: a dict hit per event
        # instead of three capped label lookups and prometheus_client's labels() (bench/metrics_signals.py).
        self._token_children: dict[tuple[object, ...], tuple[tuple[str, ...], Any]] = {}
        self._memory_keys: dict[tuple[object, ...], tuple[str, ...]] = {}

    def observe(self, events: Iterable[Event]) -> None:
        """Update the families from newly accepted events (other kinds are ignored)."""
        gaps: list[tuple[tuple[str, ...], float]] = []
        for event in events:
            kind = event.kind
            if kind == "token_latency":
                key, _ = self._tokens(event)
                for name in _GAP_ATTRS:
                    gap_ms = event.attrs.get(name)
                    if isinstance(gap_ms, _NUMBER) and gap_ms >= 0:
                        gaps.append((key, gap_ms / 1000.0))
            elif kind == "token_stall":
                key, stalls = self._tokens(event)
                stalls.inc()
                gap_ms = event.attrs.get("gap_ms")
                if isinstance(gap_ms, _NUMBER) and gap_ms >= 0:
                    gaps.append((key, gap_ms / 1000.0))
            elif kind == "mem_fragmentation":
                self._fragmentation(event)
        if gaps:
            self.token_latency.observe_many(gaps)

    def _tokens(self, event: Event) -> tuple[tuple[str, ...], Any]:
        """The capped label values of a token event's series and its stall counter."""
        raw = (event.host, event.gpu, event.attrs.get("endpoint"), event.attrs.get("model"))
        found = self._token_children.get(raw)
        if found is None:
            value = self.labels.value
            key = (value("host", raw[0]), value("gpu", raw[1]), value("endpoint", raw[2]), value("model", raw[3]))
            found = (key, self.token_stalls.labels(*key))
            if len(self._token_children) < _CHILD_CACHE:
                self._token_children[raw] = found
        return found

    def _fragmentation(self, event: Event) -> None:
        attrs = event.attrs
        raw = (event.host, event.gpu, attrs.get("scope"))
        key = self._memory_keys.get(raw)
        if key is None:
            value = self.labels.value
            key = (value("host", raw[0]), value("gpu", raw[1]), value("scope", raw[2]))
            if len(self._memory_keys) < _CHILD_CACHE:
                self._memory_keys[raw] = key
        self.memory.set(key, tuple(_number_or_none(attrs.get(name)) for name in _MEMORY_ATTRS))


def _number_or_none(value: object) -> float | None:
    return value if isinstance(value, _NUMBER) and not isinstance(value, bool) else None
