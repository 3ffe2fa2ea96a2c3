"""SLO figures on /metrics, computed from the bucket tables when Prometheus scrapes.

Labels are bounded: `slo` (the ids rulebooks define), `window` (the six lookbacks) and `good` (true/false).
An SLO with `group_by` reports its worst group: the lowest budget remaining and the highest burn rate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuslo.engine.slo.report import SloGroup

log = logging.getLogger(__name__)


class SloCollector(Collector):
    """Reads every SLO group through `groups()` at scrape time."""

    def __init__(self, groups: Callable[[], Sequence[SloGroup]]):
        self._groups = groups

    def collect(self) -> Iterator[GaugeMetricFamily]:
        remaining = GaugeMetricFamily("gpuslo_slo_error_budget_remaining_ratio",
                                      "Share of the SLO window's error budget left (worst group).", labels=["slo"])
        burn = GaugeMetricFamily("gpuslo_slo_burn_rate",
                                 "Bad ratio over the lookback / (1 - objective) (worst group).",
                                 labels=["slo", "window"])
        try:
            groups = self._groups()
        except Exception:  # a scrape must not fail because the database is briefly unavailable
            log.warning("SLO metrics: the bucket tables could not be read", exc_info=True)
            groups = ()
        worst: dict[str, float] = {}
        rates: dict[tuple[str, str], float] = {}
        for group in groups:
            slo = group.sli.slo_id
            worst[slo] = min(worst.get(slo, 1.0), group.remaining)
            for window, rate in group.burn_rates().items():
                rates[slo, window] = max(rates.get((slo, window), 0.0), rate)
        for slo, value in worst.items():
            remaining.add_metric([slo], value)
        for (slo, window), value in rates.items():
            burn.add_metric([slo, window], value)
        yield remaining
        yield burn
