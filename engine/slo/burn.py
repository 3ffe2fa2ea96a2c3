"""Burn-rate alerts as violations: the Match of an alert that starts firing, with its explanation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpuslo.engine.events import Event
from gpuslo.engine.explain import causal_chain
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.slo.maths import budget_remaining, burn_rate, exhaustion_s
from gpuslo.engine.slo.model import BurnAlert, BurnPair, Sli
from gpuslo.engine.units import format_duration
from gpuslo.engine.violations import ConditionResult, Explanation, Match

REMEDIATION = """\
1. Open the SLO's page (/slos) for the budget spent by cause: the violations open on the same hosts and GPUs
   while the bad requests happened, with their share of the budget.
2. Fix the leading cause (its violation's remediation); an unattributed share means no rule explains it yet.
3. If the burn is expected (a load test, a planned drain), silence the alert for its duration."""


@dataclass(frozen=True)
class WindowFigures:
    """good/total over one window of a pair, and the burn rate they give."""

    seconds: int
    good: int
    total: int
    burn: float


@dataclass(frozen=True)
class BurnState:
    """What one evaluation of a group saw: each pair's two windows, and the budget over the SLO window."""

    pairs: tuple[tuple[BurnPair, WindowFigures, WindowFigures], ...]
    good: int
    total: int

    def firing(self) -> tuple[BurnPair, WindowFigures, WindowFigures] | None:
        """The first pair whose long and short burn both reach its rate."""
        return next((p for p in self.pairs if p[1].burn >= p[0].burn and p[2].burn >= p[0].burn), None)

    def recovered(self) -> bool:
        """Every pair's short window is below its rate: the alert resolves."""
        return all(short.burn < pair.burn for pair, _, short in self.pairs)


def _percent(x: float) -> str:
    return f"{100 * x:.1f} %"


def burn_match(rulebook: Rulebook, sli: Sli, alert: BurnAlert, state: BurnState, group: Mapping[str, Any],
               key: str, event: Event) -> Match:
    """The violation of a burn alert that started firing at `event`."""
    firing = state.firing()
    assert firing is not None
    pair, long, short = firing
    remaining = budget_remaining(state.good, state.total, sli.target)
    left = exhaustion_s(remaining, sli.window_s, long.burn)
    spent = 1 - remaining
    conditions = []
    for window in (long, short):
        name = format_duration(window.seconds)
        conditions.append(ConditionResult(
            f"burn rate over {name} ≥ {pair.burn:g} ({window.total - window.good} bad of {window.total})",
            f"burn_rate_{name}", round(window.burn, 4), window.burn >= pair.burn))
    conditions.append(ConditionResult(f"error budget spent over the {format_duration(sli.window_s)} window "
                                      f"({state.total - state.good} bad of {state.total})",
                                      "budget_spent", round(spent, 4), spent > 0))
    conditions.append(ConditionResult("time to exhaustion at the long window's rate", "exhaustion_s",
                                      None if left is None else round(left), left is not None))
    where = ", ".join(f"{k}={v}" for k, v in group.items() if v is not None)
    summary = (f"SLO {sli.slo_id}{f' ({where})' if where else ''} burned {long.burn:.3g}× over "
               f"{format_duration(long.seconds)} and {short.burn:.3g}× over {format_duration(short.seconds)} "
               f"(≥ {pair.burn:g}×); {_percent(spent)} of the budget spent"
               + ("" if left is None else ", the budget is exhausted" if left <= 0
                  else f", exhausted in {format_duration(int(left))} at this rate"))
    return Match(
        rule_id=sli.alert_rule_id(alert), rule_title=f"Error budget of {sli.slo_id} burning ({alert.name})",
        rulebook=rulebook.name, rulebook_version=rulebook.version, rulebook_hash=rulebook.content_hash,
        slo=sli.slo_id, slo_objective=sli.description, severity=alert.severity, group_key=key,
        group=MappingProxyType(dict(group)), summary=summary, remediation=REMEDIATION, runbook=None,
        explanation=Explanation(tuple(conditions), (event,), causal_chain([event])), seen_at=event.time,
        labels=MappingProxyType({"slo": sli.slo_id, "alert": alert.name, "kind": "burn-rate"}),
        repeat_interval_s=4 * 3600.0, resolve_after_s=None)


def figures(good: int, total: int, seconds: int, target: float) -> WindowFigures:
    return WindowFigures(seconds, good, total, burn_rate(good, total, target))
