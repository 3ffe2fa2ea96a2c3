"""Prometheus metrics of one gpuslo core, in a registry of its own (no global state).

The families are grouped by where their values come from: this module (ingest and engine counters),
metrics_signals (accepted events), metrics_state (read at scrape time), metrics_http (the web app).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from gpuslo.engine.metrics_http import HttpMetrics
from gpuslo.engine.metrics_signals import SignalMetrics

# The reasons gpuslo.engine.runtime counts engine failures under.
ENGINE_ERROR_REASONS = ("observed_collision", "batch", "store", "store_conflict", "absence")


class Metrics:
    """Counters the core updates and /metrics exposes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.events_accepted = Counter(
            "gpuslo_events_accepted", "Events accepted by ingest, by kind.", ["kind"], registry=self.registry)
        # Ingest accounting: every event of a request that got through is counted once, in one of these three.
        self.events_rejected = Counter(
            "gpuslo_events_rejected", "Events refused by ingest, by kind and reason (both from fixed sets: "
            "engine/event_checks.py REASONS).", ["kind", "reason"], registry=self.registry)
        self.events_duplicate = Counter(
            "gpuslo_events_duplicate", "Events sent again with the same id and body (nothing changed), by kind.",
            ["kind"], registry=self.registry)
        self.ingest_requests_refused = Counter(
            "gpuslo_ingest_requests_refused", "Ingest requests refused whole (bad JSON, 413, 415, 429, ...), by "
            "HTTP status.", ["status"], registry=self.registry)
        self.events_quarantined = Counter(
            "gpuslo_events_quarantined", "Events the engine set aside with their error, by stage (read: the "
            "stored body fails today's checks, evaluate, store).", ["stage"], registry=self.registry)
        for stage in ("read", "evaluate", "store"):  # served as 0 from the start, so alerts see the first one
            self.events_quarantined.labels(stage)
        self.engine_restarts = Counter(
            "gpuslo_engine_restarts", "Times the supervisor restarted the engine loop after it failed.",
            registry=self.registry)
        self.violations = Counter(
            "gpuslo_rule_matches", "Rule matches recorded as violations, by rule.", ["rule"], registry=self.registry)
        self.engine_queue_depth = Gauge(
            "gpuslo_engine_queue_depth", "Events waiting for the rules engine.", registry=self.registry)
        self.engine_batch_seconds = Histogram(
            "gpuslo_engine_batch_seconds",
            "Time to evaluate one batch of queued events (up to 500) against every rulebook.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry)
        self.engine_errors = Counter(
            "gpuslo_engine_errors", "Engine failures by kind (observed-id collisions, action errors, ...).",
            ["reason"], registry=self.registry)
        for reason in ENGINE_ERROR_REASONS:  # served as 0 from the start, so rate() and alerts see the first one
            self.engine_errors.labels(reason)
        self.late_events = Counter(
            "gpuslo_late_events", "Events older than the allowed lateness when they reached the engine.",
            registry=self.registry)
        self.slo_events = Counter(
            "gpuslo_slo_events", "Request events counted by SLIs, by SLO and whether they were good.",
            ["slo", "good"], registry=self.registry)
        self.signals = SignalMetrics(self.registry)
        self.http = HttpMetrics(self.registry)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)

    def count_sli(self, deltas: Mapping[tuple[str, str, int], Sequence[int]]) -> None:
        """Count one stored batch of SLI buckets (good, total per bucket) into gpuslo_slo_events_total."""
        by_slo: dict[str, list[int]] = {}
        for (slo, _key, _minute), counts in deltas.items():
            sums = by_slo.setdefault(slo, [0, 0])
            sums[0] += counts[0]
            sums[1] += counts[1]
        for slo, (good, total) in by_slo.items():
            self.slo_events.labels(slo, "true").inc(good)
            self.slo_events.labels(slo, "false").inc(total - good)

    def exposed(self) -> WithoutCreated:
        """What /metrics serves: the registry without the `_created` samples (they double every counter)."""
        return WithoutCreated(self.registry)


class WithoutCreated(Collector):
    """A registry view whose families carry no `_created` samples; prometheus_client adds them per counter."""

    def __init__(self, registry: CollectorRegistry):
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family
