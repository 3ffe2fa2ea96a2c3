"""Measured SLOs for other tools: Prometheus recording and alerting rules (as Sloth writes them) over
gpuslo's own `gpuslo_slo_events_total{slo,good}`, and OpenSLO v1 documents.

The Prometheus rules compute each SLO's error ratio over every window the policy needs and raise the same
multi-window burn-rate alerts; they see the SLO as a whole (the counter's labels are bounded: no group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from gpuslo.engine.slo.model import LOOKBACKS, Sli
from gpuslo.engine.units import format_duration

FORMATS = ("prometheus", "openslo")
_EVENTS = "gpuslo_slo_events_total"


def _window(seconds: int) -> str:
    """A Prometheus duration: 300 → 5m, 259200 → 3d (one unit: every policy window is whole)."""
    return format_duration(seconds).replace(" ", "")


def _ratio(sli: Sli, seconds: int) -> str:
    return f"gpuslo:slo_error_ratio:rate{_window(seconds)}"


def _recording(sli: Sli) -> list[dict[str, Any]]:
    selector = f'slo="{sli.slo_id}"'
    rules = []
    for seconds in sorted({s for _, s in LOOKBACKS} | set(sli.lookbacks_s()) - {sli.window_s}):
        w = _window(seconds)
        rules.append({
            "record": _ratio(sli, seconds),
            "expr": (f'sum(rate({_EVENTS}{{{selector},good="false"}}[{w}])) / '
                     f"sum(rate({_EVENTS}{{{selector}}}[{w}]))"),
            "labels": {"slo": sli.slo_id, "service": sli.service}})
    rules.append({"record": "gpuslo:slo_objective:ratio", "expr": f"vector({sli.target})",
                  "labels": {"slo": sli.slo_id, "service": sli.service}})
    return rules


def _alerts(sli: Sli) -> list[dict[str, Any]]:
    budget = round(1 - sli.target, 10)
    selector = f'{{slo="{sli.slo_id}"}}'
    alerts = []
    for alert in sli.policy:
        terms = [f"({_ratio(sli, p.long_s)}{selector} > ({p.burn:g} * {budget:g}) and "
                 f"{_ratio(sli, p.short_s)}{selector} > ({p.burn:g} * {budget:g}))" for p in alert.pairs]
        windows = "; ".join(f"{p.burn:g}x over {_window(p.long_s)} and {_window(p.short_s)}" for p in alert.pairs)
        alerts.append({
            "alert": "GpusloSloBurn" + "".join(part.title() for part in f"{sli.slo_id}-{alert.name}".split("-")),
            "expr": " or ".join(terms),
            "labels": {"severity": alert.severity, "slo": sli.slo_id, "service": sli.service,
                       "burn_alert": alert.name},
            "annotations": {"summary": f"Error budget of {sli.slo_id} burning ({alert.name})",
                            "description": f"{sli.description}: target {sli.target:g}; fires at {windows}"}})
    return alerts


def prometheus_rules(slis: Sequence[Sli]) -> str:
    """One rules file: a recording group and an alerting group per SLO."""
    groups = []
    for sli in slis:
        groups.append({"name": f"gpuslo-slo-{sli.slo_id}-sli", "rules": _recording(sli)})
        groups.append({"name": f"gpuslo-slo-{sli.slo_id}-alerts", "rules": _alerts(sli)})
    return str(yaml.safe_dump({"groups": groups}, sort_keys=False, width=120))


def _query(sli: Sli, good: bool | None) -> dict[str, Any]:
    extra = "" if good is None else ',good="true"'
    return {"metricSource": {"type": "Prometheus",
                             "spec": {"query": f'sum({_EVENTS}{{slo="{sli.slo_id}"{extra}}})'}}}


def openslo_documents(slis: Sequence[Sli]) -> str:
    """OpenSLO v1: per SLO an SLO (ratio indicator over the counter, occurrences budgeting) and one
    AlertPolicy per burn alert (OpenSLO's burn-rate condition: the long window, and the short one as alertAfter)."""
    docs: list[dict[str, Any]] = []
    for sli in slis:
        window = ({"duration": "1M", "isRolling": False,
                   "calendar": {"startTime": "2020-01-01 00:00:00", "timeZone": "UTC"}} if sli.calendar
                  else {"duration": _window(sli.window_s), "isRolling": True})
        policies = [f"{sli.slo_id}-burn-{a.name}" for a in sli.policy]
        docs.append({
            "apiVersion": "openslo/v1", "kind": "SLO",
            "metadata": {"name": sli.slo_id, "displayName": sli.description},
            "spec": {
                "description": f"requests: {sli.kind}"
                               + (f" if {sli.requests.condition_text}" if sli.requests.condition_text else "")
                               + f"; good: {sli.good_text}",
                "service": sli.service,
                "indicator": {"metadata": {"name": f"{sli.slo_id}-sli"},
                              "spec": {"ratioMetric": {"counter": True, "good": _query(sli, True),
                                                       "total": _query(sli, None)}}},
                "timeWindow": [window], "budgetingMethod": "Occurrences",
                "objectives": [{"displayName": sli.description, "target": sli.target}],
                "alertPolicies": policies}})
        for alert, name in zip(sli.policy, policies, strict=True):
            docs.append({
                "apiVersion": "openslo/v1", "kind": "AlertPolicy", "metadata": {"name": name},
                "spec": {"description": f"{alert.name} burn alert of {sli.slo_id}", "alertWhenBreaching": True,
                         "conditions": [{"kind": "AlertCondition",
                                         "metadata": {"name": f"{name}-{i}"},
                                         "spec": {"severity": alert.severity,
                                                  "condition": {"kind": "burnrate", "op": "gte",
                                                                "threshold": p.burn,
                                                                "lookbackWindow": _window(p.long_s),
                                                                "alertAfter": _window(p.short_s)}}}
                                        for i, p in enumerate(alert.pairs)],
                         "notificationTargets": []}})
    return str(yaml.safe_dump_all(docs, sort_keys=False, width=120))
