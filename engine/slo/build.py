"""Build the frozen Sli of an SLO's validated `indicator:` section, and compile it for counting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuslo.engine.rulebook.marked_yaml import Path_
from gpuslo.engine.rulebook.model import EventPattern, Expr
from gpuslo.engine.slo.model import DEFAULT_POLICY, BurnAlert, BurnPair, CompiledSli, Sli
from gpuslo.engine.units import parse_duration


def build_sli(rulebook: str, slo_id: str, slo: dict[str, Any], conditions: Mapping[Path_, Expr]) -> Sli | None:
    """The SLI of a validated SLO, or None when it has no `indicator:`; `conditions` are those the validation
    parsed, by path."""
    indicator = slo.get("indicator")
    if not isinstance(indicator, dict):
        return None
    path = ("slos", slo_id, "indicator")
    kind = indicator["requests"]["event"]
    request_if = indicator["requests"].get("if")
    requests = EventPattern(kind, conditions[(*path, "requests", "if")] if request_if else None,
                            condition_text=request_if)
    return Sli(slo_id=slo_id, rulebook=rulebook, service=slo["service"], description=slo["objective"],
               requests=requests, good=conditions[(*path, "good")], good_text=indicator["good"],
               target=float(indicator["target"]), window_s=int(parse_duration(slo["window"])),
               calendar=indicator.get("calendar"), group_by=tuple(indicator.get("group_by", ())),
               policy=_policy(indicator.get("burn_alerts")))


def _policy(alerts: list[dict[str, Any]] | None) -> tuple[BurnAlert, ...]:
    """The burn alerts as written (entries of one name are OR'ed pairs of one alert), else the default."""
    if not alerts:
        return DEFAULT_POLICY
    by_name: dict[str, tuple[str, list[BurnPair]]] = {}
    for alert in alerts:
        severity, pairs = by_name.setdefault(alert["name"], (alert.get("severity", "critical"), []))
        pairs.append(BurnPair(float(alert["burn"]), int(parse_duration(alert["long"])),
                              int(parse_duration(alert["short"]))))
    return tuple(BurnAlert(name, severity, tuple(pairs)) for name, (severity, pairs) in by_name.items())


def compile_sli(sli: Sli) -> CompiledSli:
    # Imported here: predicate needs the explainer, which imports the rulebook package that imports this module.
    from gpuslo.engine.slo.predicate import predicate

    return CompiledSli(sli, predicate(sli.requests.condition), predicate(sli.good))
