"""Families fed on the ingest path, kept as plain values and served by collectors: a histogram with one lock per
batch of observations (prometheus_client takes a lock per bucket, sum and count of every observation), and gauges
that hold the latest values of a series in one dict assignment (bench/metrics_signals.py measures them against
the event validation ingest already does; prometheus_client's families cost as much as that validation)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

# prometheus_client leaves it unannotated; it formats a bucket edge as the text exposition writes `le`.
_go_string: Callable[[float], str] = floatToGoString


class BatchHistogram(Collector):
    """Histogram `name` with `labels`; `observe_many` adds (label values, value) pairs under one lock."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float],
                 registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self.buckets = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], list[float]] = {}  # per bucket, then +Inf, then the sum
        self._lock = threading.Lock()
        registry.register(self)

    def observe_many(self, observations: Iterable[tuple[tuple[str, ...], float]]) -> None:
        width = len(self.buckets) + 1
        with self._lock:
            for key, value in observations:
                counts = self._series.get(key)
                if counts is None:
                    counts = self._series[key] = [0.0] * (width + 1)
                counts[bisect.bisect_left(self.buckets, value)] += 1
                counts[width] += value

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        with self._lock:
            series = {key: list(counts) for key, counts in self._series.items()}
        edges = [_go_string(b) for b in self.buckets] + ["+Inf"]
        for key, counts in sorted(series.items()):
            cumulative, running = [], 0.0
            for edge, count in zip(edges, counts[:-1], strict=True):
                running += count
                cumulative.append((edge, running))
            family.add_metric(list(key), cumulative, counts[-1])
        yield family


class LatestGauges(Collector):
    """Gauges sharing `labels` whose values are the latest sample of each series: `set(key, values)` replaces the
    series' values (None leaves a gauge unset) in one dict assignment, atomic under the GIL."""

    def __init__(self, gauges: Sequence[tuple[str, str]], labels: Sequence[str], registry: CollectorRegistry):
        self.gauges = tuple(gauges)  # (name, help)
        self.labels = tuple(labels)
        self._latest: dict[tuple[str, ...], tuple[float | None, ...]] = {}
        registry.register(self)

    def set(self, key: tuple[str, ...], values: tuple[float | None, ...]) -> None:
        self._latest[key] = values

    def value(self, name: str, key: tuple[str, ...]) -> float | None:
        index = [n for n, _ in self.gauges].index(name)
        values = self._latest.get(key)
        return None if values is None else values[index]

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for name, documentation in self.gauges:
            yield GaugeMetricFamily(name, documentation, labels=self.labels)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        latest = sorted(dict(self._latest).items())
        for index, (name, documentation) in enumerate(self.gauges):
            family = GaugeMetricFamily(name, documentation, labels=self.labels)
            for key, values in latest:
                value = values[index]
                if value is not None:
                    family.add_metric(list(key), value)
            yield family
