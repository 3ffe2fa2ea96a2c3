"""Frozen SLI definitions: which events are requests, which of them are good, the objective, window and alerts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpuslo.engine.events import Event
from gpuslo.engine.rulebook.model import EventPattern, Expr

BUCKET_S = 60  # one-minute buckets
# The lookbacks every SLO reports (API, UI, /metrics), in seconds.
LOOKBACKS: tuple[tuple[str, int], ...] = (("5m", 300), ("30m", 1800), ("1h", 3600), ("6h", 21600),
                                          ("1d", 86400), ("3d", 259200))
MIN_WINDOW_S = 3600.0
RETENTION_MARGIN_S = 86400.0  # buckets are kept this long beyond the window (late events, backfills)


@dataclass(frozen=True)
class BurnPair:
    """Fires when the burn rate over both `long_s` and `short_s` is at least `burn`."""

    burn: float
    long_s: int
    short_s: int


@dataclass(frozen=True)
class BurnAlert:
    """One alert of the burn-rate policy (`page`, `ticket`): any of its pairs firing raises it."""

    name: str
    severity: str
    pairs: tuple[BurnPair, ...]


# The SRE workbook's multi-window multi-burn-rate policy (chapter 5, table 5-8).
DEFAULT_POLICY: tuple[BurnAlert, ...] = (
    BurnAlert("page", "critical", (BurnPair(14.4, 3600, 300), BurnPair(6.0, 21600, 1800))),
    BurnAlert("ticket", "warning", (BurnPair(1.0, 259200, 21600),)),
)


@dataclass(frozen=True)
class Sli:
    """An SLO's indicator: `requests` picks the events counted, `good` the good ones among them."""

    slo_id: str
    rulebook: str
    service: str
    description: str  # the SLO's `objective` text
    requests: EventPattern
    good: Expr
    good_text: str
    target: float
    window_s: int
    calendar: str | None = None  # "month": the budget runs over the calendar month, not a rolling window
    group_by: tuple[str, ...] = ()
    policy: tuple[BurnAlert, ...] = DEFAULT_POLICY

    @property
    def kind(self) -> str:
        return self.requests.kind

    def alert_rule_id(self, alert: BurnAlert) -> str:
        """The rule id the burn alert's violations carry."""
        return f"{self.slo_id}-burn-{alert.name}"

    def lookbacks_s(self) -> tuple[int, ...]:
        """Every lookback the counter keeps running sums for: the reported ones and the policy's."""
        seconds = {s for _, s in LOOKBACKS}
        seconds |= {s for alert in self.policy for pair in alert.pairs for s in (pair.long_s, pair.short_s)}
        if not self.calendar:
            seconds.add(self.window_s)  # the budget's rolling window is one more running sum
        return tuple(sorted(seconds))

    def retention_s(self) -> float:
        return (31 * 86400 if self.calendar else self.window_s) + RETENTION_MARGIN_S


@dataclass(frozen=True)
class CompiledSli:
    """An SLI with its conditions compiled into predicates (built once per load, read per event)."""

    sli: Sli
    is_request: Callable[[Event], bool]
    is_good: Callable[[Event], bool]


def burn_rule_ids(slis: Iterable[Sli]) -> tuple[str, ...]:
    """The rule ids of every burn alert of these SLIs (the store never charges bad requests to them)."""
    return tuple(sli.alert_rule_id(alert) for sli in slis for alert in sli.policy)
