"""Metrics read at scrape time from the service's state: open violations, engine health, rulebook loads, build."""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateSnapshot:
    """What the state collector reports; `open_violations` maps (severity, status) to a count."""

    open_violations: dict[tuple[str, str], int]
    engine_running: bool
    rulebooks_loaded: int
    rulebook_load_errors: int


def build_version() -> str:
    try:
        return metadata.version("gpuslo")
    except metadata.PackageNotFoundError:  # running from a tree that was never installed
        return "unknown"


class StateCollector(Collector):
    """Collects a StateSnapshot on every scrape; a failing snapshot reports the violations family empty."""

    def __init__(self, snapshot: Callable[[], StateSnapshot], severities: tuple[str, ...],
                 statuses: tuple[str, ...]):
        self._snapshot = snapshot
        self._severities = severities
        self._statuses = statuses
        self._version = build_version()

    def collect(self) -> Iterator[GaugeMetricFamily | InfoMetricFamily]:
        yield InfoMetricFamily("gpuslo_build", "The running gpuslo's version and Python.",
                               value={"version": self._version, "python_version": platform.python_version()})
        try:
            state = self._snapshot()
        except Exception:  # a scrape must answer even when the database does not
            log.warning("metrics: could not read the service state", exc_info=True)
            return
        violations = GaugeMetricFamily(
            "gpuslo_open_violations", "Unresolved violations by severity and status (open, acknowledged).",
            labels=["severity", "status"])
        for severity in self._severities:
            for status in self._statuses:
                violations.add_metric([severity, status], state.open_violations.get((severity, status), 0))
        yield violations
        yield GaugeMetricFamily("gpuslo_engine_up", "1 while the rules engine thread runs, else 0.",
                                value=1 if state.engine_running else 0)
        yield GaugeMetricFamily("gpuslo_rulebooks_loaded", "Rulebooks running now.", value=state.rulebooks_loaded)
        yield GaugeMetricFamily(
            "gpuslo_rulebook_load_errors",
            "Problems of the last rulebook load (a broken file keeps its last good version running).",
            value=state.rulebook_load_errors)
