"""Passive probe: turn an inference server's latency histograms into windowed quantiles between scrapes."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuslo.engine.events import Event
from gpuslo.probes.tokens.measure import (
    EventContext,
    WindowStats,
    new_event_id,
    wall_time,
    window_event,
)


@dataclass(frozen=True)
class Metric:
    """A latency histogram an inference server exports, in seconds."""

    name: str
    engine: str
    role: str  # "itl" or "ttft"
    per_token: bool = False  # one observation per generated token (not one per request)


# Preference order: the first ITL metric present for a model wins.
METRICS: tuple[Metric, ...] = (
    Metric("vllm:inter_token_latency_seconds", "vllm", "itl", per_token=True),
    Metric("vllm:time_per_output_token_seconds", "vllm", "itl"),
    Metric("sglang:inter_token_latency_seconds", "sglang", "itl", per_token=True),
    Metric("tgi_request_mean_time_per_token_duration", "tgi", "itl"),
    Metric("vllm:time_to_first_token_seconds", "vllm", "ttft"),
    Metric("sglang:time_to_first_token_seconds", "sglang", "ttft"),
)
_BY_NAME = {metric.name: metric for metric in METRICS}
_MODEL_LABELS = ("model_name", "model")


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (ascending, ending at +Inf)."""

    buckets: tuple[tuple[float, float], ...]

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0

    def minus(self, previous: Histogram | None) -> Histogram:
        """Increase since `previous`; a counter reset (any bucket went down) counts from zero."""
        if previous is None:
            return self
        bounds = [le for le, _ in self.buckets]
        if bounds != [le for le, _ in previous.buckets] or any(
                now < before for (_, now), (_, before) in zip(self.buckets, previous.buckets, strict=True)):
            return self
        return Histogram(tuple((le, now - before) for (le, now), (_, before)
                               in zip(self.buckets, previous.buckets, strict=True)))


def histogram_quantile(q: float, hist: Histogram) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q·count."""
    if hist.count <= 0 or not hist.buckets or not math.isinf(hist.buckets[-1][0]):
        return None
    rank = q * hist.count
    lower, below = 0.0, 0.0
    for index, (upper, cumulative) in enumerate(hist.buckets):
        if cumulative >= rank and cumulative > below:
            if math.isinf(upper):
                # Prometheus answers the highest finite bound when the rank falls in the +Inf bucket.
                return hist.buckets[index - 1][0] if index > 0 else None
            if index == 0 and upper <= 0:
                return upper
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        lower, below = upper, cumulative
    return None


SeriesKey = tuple[str, str, frozenset[tuple[str, str]]]  # metric, model, the other labels


def parse_histograms(text: str, model_fallback: str = "") -> dict[SeriesKey, Histogram]:
    """Every known latency histogram series in a Prometheus text exposition."""
    series: dict[SeriesKey, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            base = sample.name.removesuffix("_bucket")
            if base == sample.name or base not in _BY_NAME or "le" not in sample.labels:
                continue
            model = next((sample.labels[k] for k in _MODEL_LABELS if k in sample.labels), model_fallback)
            rest = frozenset((k, v) for k, v in sample.labels.items() if k != "le")
            series.setdefault((base, model, rest), {})[float(sample.labels["le"])] = float(sample.value)
    return {key: Histogram(tuple(sorted(buckets.items()))) for key, buckets in series.items()}


def window_deltas(current: Mapping[SeriesKey, Histogram], previous: Mapping[SeriesKey, Histogram]
                  ) -> dict[tuple[str, str], Histogram]:
    """Per-series increases (reset-aware, new series count from zero), summed by (metric, model) the way
    `sum by (le, model_name) (increase(...))` would, e.g. over vLLM's data-parallel `engine` label."""
    sums: dict[tuple[str, str], dict[float, float]] = {}
    for key, hist in current.items():
        total = sums.setdefault(key[:2], {})
        for upper, count in hist.minus(previous.get(key)).buckets:
            total[upper] = total.get(upper, 0.0) + count
    return {key: Histogram(tuple(sorted(buckets.items()))) for key, buckets in sums.items()}


def _first(deltas: Mapping[tuple[str, str], Histogram], model: str, role: str
           ) -> tuple[Metric, Histogram] | None:
    """The preferred metric of a role with observations in the window, and its delta."""
    for metric in METRICS:
        hist = deltas.get((metric.name, model))
        if metric.role == role and hist is not None and hist.count > 0:
            return metric, hist
    return None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


@dataclass(frozen=True)
class PassiveProbeConfig:
    """Where to scrape, the model name for unlabeled servers (TGI), and which TTFT quantile to report."""

    url: str
    model: str = ""
    ttft_quantile: float = 0.99
    timeout_s: float = 10.0
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class _Scrape:
    mono_ns: int
    histograms: Mapping[SeriesKey, Histogram]


class PassiveTokenProbe:
    """Keeps the previous scrape; each later scrape yields one `token_latency` event per active model."""

    def __init__(self, config: PassiveProbeConfig, *, host: str | None = None,
                 client: httpx.Client | None = None) -> None:
        self.config = config
        self.host = host or socket.gethostname()
        self._client = client or httpx.Client(trust_env=False)
        self._owns_client = client is None
        self._previous: _Scrape | None = None

    def scrape_once(self) -> list[Event]:
        """Fetch the metrics page and observe it; a failed scrape is one `probe_status` "down" event."""
        wall_ns = time.time_ns()
        try:
            response = self._client.get(self.config.url, timeout=self.config.timeout_s)
            response.raise_for_status()
            return self.observe(response.text, time.monotonic_ns(), wall_ns)
        except (httpx.HTTPError, ValueError) as exc:
            detail = f"scrape {self.config.url} failed: {type(exc).__name__}: {exc}"[:1024]
            return [Event(id=new_event_id(), kind="probe_status", time=wall_time(wall_ns), host=self.host,
                          source="tokens", attrs=MappingProxyType(
                              {"probe": "tokens.passive", "state": "down", "detail": detail}))]

    def observe(self, text: str, mono_ns: int, wall_ns: int) -> list[Event]:
        """Take a scrape taken at the given clocks; events cover the window since the previous one."""
        current = _Scrape(mono_ns, parse_histograms(text, self.config.model))
        previous, self._previous = self._previous, current
        if previous is None:
            return []
        window_s = (current.mono_ns - previous.mono_ns) / 1e9
        deltas = window_deltas(current.histograms, previous.histograms)
        events = []
        for model in sorted({model for _, model in deltas}):
            event = self._model_event(model, deltas, window_s, wall_ns)
            if event is not None:
                events.append(event)
        return events

    def _model_event(self, model: str, deltas: Mapping[tuple[str, str], Histogram], window_s: float,
                     wall_ns: int) -> Event | None:
        itl = _first(deltas, model, "itl")
        ttft = _first(deltas, model, "ttft")
        if itl is None and ttft is None:
            return None  # no traffic in the window: nothing to say
        requests = round(ttft[1].count) if ttft else None
        tokens = None
        if itl and ttft and itl[0].per_token:
            tokens = round(itl[1].count + ttft[1].count)  # n tokens of a request make n-1 gaps
        stats = WindowStats(
            window_s=window_s, requests=requests, tokens=tokens,
            ttft_ms=_ms(histogram_quantile(self.config.ttft_quantile, ttft[1])) if ttft else None,
            itl_p50_ms=_ms(histogram_quantile(0.5, itl[1])) if itl else None,
            itl_p99_ms=_ms(histogram_quantile(0.99, itl[1])) if itl else None)
        engine = (itl or ttft)[0].engine  # type: ignore[index]
        ctx = EventContext(host=self.host, endpoint=self.config.url, model=model,
                           labels=MappingProxyType({**self.config.labels, "engine": engine}))
        return window_event(ctx, stats, wall_time(wall_ns))

    def close(self) -> None:
        """Close the HTTP client if this probe made it."""
        if self._owns_client:
            self._client.close()
