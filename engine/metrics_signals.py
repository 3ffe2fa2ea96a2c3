"""Metrics read off accepted events: the token-latency histogram and the allocator's fragmentation gauges.

Their labels come from probes (host, GPU, endpoint, model), so each label keeps at most `cap` distinct values and
later ones are counted under "other": a fleet that grows cannot grow the series count without bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpuslo.engine.events import Event

OTHER = "other"
NONE = ""  # an event without a GPU (or endpoint, model) is labelled with the empty value
LABEL_CAP = 64
# Inter-token gaps from 10 ms (a fast decode step) to 5 s (a hung stream); the 0.25 s bucket edge is the token
# rules' default stall threshold.
TOKEN_BUCKETS = (0.01, 0.015, 0.025, 0.04, 0.06, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0, 1.5, 2.5, 5.0)
_GAP_ATTRS = ("itl_p50_ms", "itl_p99_ms", "itl_max_ms")


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
        self.token_latency = Histogram(
            "gpuslo_token_latency_seconds",
            "Inter-token gaps reported by token probes: each token_latency window's p50, p99 and max gap and "
            "every token_stall gap.",
            token_labels, buckets=TOKEN_BUCKETS, registry=registry)
        self.token_stalls = Counter(
            "gpuslo_token_stalls", "token_stall events (gaps over the probe's stall threshold).", token_labels,
            registry=registry)
        memory_labels = ["host", "gpu", "scope"]
        self.fragmentation_ratio = Gauge(
            "gpuslo_fragmentation_ratio",
            "Latest fragmentation ratio (free - largest free block) / free per host, GPU and scope.",
            memory_labels, registry=registry)
        self.free_bytes = Gauge(
            "gpuslo_memory_free_bytes", "Latest free memory the fragmentation ratio is taken over.",
            memory_labels, registry=registry)
        self.largest_free_bytes = Gauge(
            "gpuslo_memory_largest_free_block_bytes", "Latest largest free block.", memory_labels,
            registry=registry)

    def observe(self, events: Iterable[Event]) -> None:
        """Update the families from newly accepted events (other kinds are ignored)."""
        for event in events:
            if event.kind == "token_latency":
                self._token_window(event)
            elif event.kind == "token_stall":
                self._token_stall(event)
            elif event.kind == "mem_fragmentation":
                self._fragmentation(event)

    def _token_key(self, event: Event) -> tuple[str, str, str, str]:
        value = self.labels.value
        return (value("host", event.host), value("gpu", event.gpu),
                value("endpoint", event.attrs.get("endpoint")), value("model", event.attrs.get("model")))

    def _token_window(self, event: Event) -> None:
        child = self.token_latency.labels(*self._token_key(event))
        for name in _GAP_ATTRS:
            gap_ms = event.attrs.get(name)
            if isinstance(gap_ms, int | float) and gap_ms >= 0:
                child.observe(gap_ms / 1000.0)

    def _token_stall(self, event: Event) -> None:
        key = self._token_key(event)
        self.token_stalls.labels(*key).inc()
        gap_ms = event.attrs.get("gap_ms")
        if isinstance(gap_ms, int | float) and gap_ms >= 0:
            self.token_latency.labels(*key).observe(gap_ms / 1000.0)

    def _fragmentation(self, event: Event) -> None:
        value = self.labels.value
        key = (value("host", event.host), value("gpu", event.gpu), value("scope", event.attrs.get("scope")))
        for gauge, name in ((self.fragmentation_ratio, "fragmentation_ratio"), (self.free_bytes, "free_bytes"),
                            (self.largest_free_bytes, "largest_free_bytes")):
            number = event.attrs.get(name)
            if isinstance(number, int | float):
                gauge.labels(*key).set(number)
