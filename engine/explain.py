"""Turn a rule match into its explanation: conditions with observed values, evidence, causal chain, summary."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from jinja2 import Template

from gpuslo.engine.attribution import worst_stall_attribution
from gpuslo.engine.cascades import analyze_cascade
from gpuslo.engine.collectives import analyze_hang
from gpuslo.engine.events import Event, format_time
from gpuslo.engine.once import deferred
from gpuslo.engine.rulebook.model import (
    Absence,
    And,
    Compare,
    Correlation,
    EventPattern,
    Exists,
    Expr,
    FieldRef,
    Literal,
    Not,
    Or,
    Rule,
    Rulebook,
    SingleEvent,
)
from gpuslo.engine.rulebook.operators import OPERATORS, holds, negation_normal_form
from gpuslo.engine.templates import RenderRefused, summary_environment
from gpuslo.engine.violations import ChainLink, ConditionResult, Explanation, Match

log = logging.getLogger(__name__)
# A summary that used up its steps or CPU this many renders in a row is not rendered again (its default text is
# used) until its text changes: one such template must not cost the engine 0.25 s on every event.
COSTLY_STRIKES = 3
_KEY_ATTRS = ("requested_bytes", "free_bytes", "fragmentation_ratio", "gap_ms", "itl_p99_ms", "ttft_ms",
              "xid", "op", "seq", "error_name", "api", "state", "phase", "request_id")


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return repr(value) if isinstance(value, str) else str(value)


def _leaves(expr: Expr, negated: bool = False) -> list[tuple[Compare | Exists, bool]]:
    if isinstance(expr, And | Or):
        return [leaf for item in expr.items for leaf in _leaves(item, negated)]
    if isinstance(expr, Not):
        return _leaves(expr.item, not negated)
    return [(expr, negated)]


def _resolve(ref: Literal | FieldRef, events: Mapping[str, Event]) -> Any:
    if isinstance(ref, Literal):
        return ref.value
    return events[ref.alias].get(ref.name) if ref.alias is not None and ref.alias in events else None


def _leaf_holds(leaf: Compare | Exists, negated: bool, event: Event, events: Mapping[str, Event]) -> bool:
    if isinstance(leaf, Exists):
        return (event.get(leaf.field.name) is None) == negated
    observed = event.get(leaf.left.name)
    # A missing field never holds, negated or not: the engine reads it as None and matches nothing.
    return observed is not None and (holds(leaf.op, observed, _resolve(leaf.right, events)) != negated)


def condition_holds(expr: Expr, event: Event, events: Mapping[str, Event]) -> bool:
    """The whole condition on one event, with the engine's semantics (used to check the compiled form)."""
    def walk(node: Expr) -> bool:
        if isinstance(node, And):
            return all(walk(i) for i in node.items)
        if isinstance(node, Or):
            return any(walk(i) for i in node.items)
        if isinstance(node, Not):
            return _leaf_holds(node.item, True, event, events)  # type: ignore[arg-type]
        return _leaf_holds(node, False, event, events)

    return walk(negation_normal_form(expr))


def _deciding_leaves(expr: Expr, event: Event, events: Mapping[str, Event]) -> list[tuple[Compare | Exists, bool]]:
    """The leaves that decided the outcome: of an `or`, only the first branch that held (all when none did)."""
    if isinstance(expr, And):
        return [leaf for item in expr.items for leaf in _deciding_leaves(item, event, events)]
    if isinstance(expr, Or):
        for item in expr.items:
            if condition_holds(item, event, events):
                return _deciding_leaves(item, event, events)
        return _leaves(expr)
    return _leaves(expr)


def explain_conditions(pattern: EventPattern, event: Event, events: Mapping[str, Event]) -> list[ConditionResult]:
    """Each leaf of the pattern's condition with the value the event showed."""
    results = [ConditionResult(f"kind = {event.kind}", "kind", event.kind, event.kind == pattern.kind)]
    if pattern.condition is None:
        return results
    for leaf, negated in _deciding_leaves(negation_normal_form(pattern.condition), event, events):
        if isinstance(leaf, Exists):
            observed = event.get(leaf.field.name)
            holds = _leaf_holds(leaf, negated, event, events)
            text = f"{leaf.field} {'is missing' if negated else 'is present'}"
            results.append(ConditionResult(text, leaf.field.name, observed, holds))
            continue
        observed = event.get(leaf.left.name)
        holds = _leaf_holds(leaf, negated, event, events)
        op = ("not " if negated else "") + OPERATORS[leaf.op].shown
        shown = "missing" if observed is None else _show(observed)
        text = f"{leaf.left.name} = {shown} {op} {leaf.right}"
        results.append(ConditionResult(text, leaf.left.name, observed, holds))
    return results


def describe_event(event: Event) -> str:
    """One line about an event for chains and timelines."""
    where = event.host + (f" GPU {event.gpu}" if event.gpu is not None else "")
    details = ", ".join(f"{k}={_show(event.attrs[k])}" for k in _KEY_ATTRS if k in event.attrs)
    return f"{event.kind} on {where} at {format_time(event.time)[11:23]}" + (f" ({details})" if details else "")


def causal_chain(events: Sequence[Event]) -> tuple[ChainLink, ...]:
    """The evidence in event-time order with the delay between links."""
    links: list[ChainLink] = []
    previous: datetime | None = None
    for event in sorted(events, key=lambda e: (e.time, e.id)):
        delay = (event.time - previous).total_seconds() if previous else None
        links.append(ChainLink(event.id, event.kind, event.time, describe_event(event), delay))
        previous = event.time
    return tuple(links)


def group_of(rule: Rule, events: Sequence[Event]) -> dict[str, Any]:
    """The group_by values, taken from the first evidence event that has them."""
    keys = rule.group_by or (rule.when.same if isinstance(rule.when, Correlation) else ())
    group: dict[str, Any] = {}
    for key in keys:
        group[key] = next((e.get(key) for e in events if e.get(key) is not None), None)
    return group


def group_key(group: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={'' if v is None else v}" for k, v in group.items()) or "-"


class SummaryRenderer:
    """Renders rule summaries in the bounded Jinja2 sandbox; a render that fails in any way (an exception of any
    type, a bound of engine/template_limits.py) falls back to the rule's default sentence."""

    def __init__(self) -> None:
        self._env = summary_environment()
        self._templates: dict[str, Template | None] = {}  # compiled once per summary text; None: did not compile
        self._warned: set[tuple[str, str]] = set()  # (rule, failure) already logged, so a flood logs once
        self._strikes: dict[str, int] = {}  # summary text → renders in a row that used up their steps or CPU

    def render(self, rule: Rule, event: Event, group: Mapping[str, Any], evidence: Sequence[Event] = ()) -> str:
        try:
            if self._strikes.get(rule.summary, 0) >= COSTLY_STRIKES:
                raise RenderRefused(f"disabled: used up its steps or CPU {COSTLY_STRIKES} times in a row")
            text = self._render(rule, event, group, evidence)
        except Exception as exc:  # noqa: BLE001 - any failure of a summary must cost only its text, never the match
            if isinstance(exc, RenderRefused) and exc.costly:
                self._strikes[rule.summary] = self._strikes.get(rule.summary, 0) + 1
            self._warn(rule, exc)
            return self.fallback(rule, group)
        self._strikes.pop(rule.summary, None)
        return " ".join(text.split()) or self.fallback(rule, group)

    def _render(self, rule: Rule, event: Event, group: Mapping[str, Any], evidence: Sequence[Event]) -> str:
        # `collective`: the rank-mismatch analysis of the evidence's NCCL timeouts, for summaries that ask
        hang = analyze_hang(evidence) if "collective" in rule.summary else None
        # `cascade`: the root and the cascades among the evidence (engine/cascades.py)
        cascade = analyze_cascade(evidence) if "cascade" in rule.summary else None
        context = {"event": event.to_dict(), "group": dict(group), "collective": hang.to_dict() if hang else None,
                   "cascade": cascade.to_dict() if cascade else None}
        if rule.summary not in self._templates:
            self._templates[rule.summary] = None  # stays None when compiling fails: not retried per event
            self._templates[rule.summary] = self._env.from_string(rule.summary)
        template = self._templates[rule.summary]
        if template is None:
            raise RenderRefused("the summary template did not compile")
        return self._env.render_compiled(template, context)

    def _warn(self, rule: Rule, exc: Exception) -> None:
        key = (rule.id, type(exc).__name__)
        if key in self._warned or len(self._warned) > 1000:
            return
        self._warned.add(key)
        log.warning("summary of rule %s failed to render (%s: %s); using the default text",
                    rule.id, type(exc).__name__, str(exc)[:200])

    @staticmethod
    def fallback(rule: Rule, group: Mapping[str, Any]) -> str:
        return f"{rule.title} ({group_key(group)})"


def lifecycle_fields(rule: Rule) -> dict[str, Any]:
    """The Match fields that carry the rule's repeat, flap and resolve options."""
    options = rule.lifecycle
    return {"repeat_interval_s": options.repeat_interval_s, "flap_window_s": options.flap_window_s,
            "resolve_after_s": options.resolve_after_s}


def build_match(rulebook: Rulebook, rule: Rule, events: Mapping[str, Event], renderer: SummaryRenderer) -> Match:
    """Assemble the Match for a rule that fired on `events` (alias → event)."""
    ordered = sorted(events.values(), key=lambda e: (e.time, e.id))
    patterns = rule.when.patterns if isinstance(rule.when, Correlation) else (rule.when.pattern,)
    conditions: list[ConditionResult] = []
    for pattern in patterns:
        if pattern.alias in events:
            conditions += explain_conditions(pattern, events[pattern.alias], events)
    if isinstance(rule.when, Correlation) and len(ordered) > 1:
        span = (ordered[-1].time - ordered[0].time).total_seconds()
        conditions.append(ConditionResult(f"span = {span:.3g}s ≤ {rule.when.within_s:g}s", "time", span, True))
    group = group_of(rule, ordered)
    slo = rulebook.slos.get(rule.slo)
    summary_event = events.get("m") or ordered[-1]
    return Match(
        rule_id=rule.id, rule_title=rule.title, rulebook=rulebook.name, rulebook_version=rulebook.version,
        rulebook_hash=rulebook.content_hash, slo=rule.slo, slo_objective=slo.objective if slo else "",
        severity=rule.severity, group_key=group_key(group), group=MappingProxyType(group),
        summary=deferred(lambda: renderer.render(rule, summary_event, group, ordered)), remediation=rule.remediation,
        runbook=rule.runbook, explanation=Explanation(tuple(conditions), tuple(ordered), causal_chain(ordered),
                                                    worst_stall_attribution(ordered)),
        seen_at=ordered[-1].time, labels=rule.labels, **lifecycle_fields(rule),
    )


def _listing(names: tuple[str, ...]) -> str:
    """`host`, `host and gpu`, `host, gpu and pid`."""
    return names[-1] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _absence_conditions(when: Absence, last: Event, silence_s: float) -> list[ConditionResult]:
    """What was expected, for how long, and the silence observed; with the arming event's own conditions."""
    pattern = when.pattern
    expected = pattern.kind + (f" where {pattern.condition_text}" if pattern.condition_text else "")
    at = format_time(last.time)[11:23]
    if when.after is None:
        text = f"no {expected} for {silence_s:.0f}s > {when.for_s:g}s (last at {at})"
        return [ConditionResult(text, "time", round(silence_s, 3), True)]
    same = f" with the same {_listing(when.same)}" if when.same else ""
    text = f"no {expected}{same} within {when.for_s:g}s of the {last.kind} at {at} (none for {silence_s:.1f}s)"
    return [*explain_conditions(when.after, last, {when.after.alias: last}),
            ConditionResult(text, "time", round(silence_s, 3), True)]


def build_absence_match(rulebook: Rulebook, rule: Rule, last: Event, silence_s: float, now: float,
                        renderer: SummaryRenderer) -> Match:
    """The Match of an absence rule: the last expected event (a heartbeat) or the arming event as evidence, and
    the silence as its condition."""
    assert isinstance(rule.when, Absence)
    group = group_of(rule, [last])
    conditions = _absence_conditions(rule.when, last, silence_s)
    slo = rulebook.slos.get(rule.slo)
    seen = datetime.fromtimestamp(now, UTC)
    return Match(
        rule_id=rule.id, rule_title=rule.title, rulebook=rulebook.name, rulebook_version=rulebook.version,
        rulebook_hash=rulebook.content_hash, slo=rule.slo, slo_objective=slo.objective if slo else "",
        severity=rule.severity, group_key=group_key(group), group=MappingProxyType(group),
        summary=deferred(lambda: renderer.render(rule, last, group)), remediation=rule.remediation,
        runbook=rule.runbook,
        explanation=Explanation(tuple(conditions), (last,), causal_chain([last])), seen_at=seen, labels=rule.labels,
        **lifecycle_fields(rule))


__all__ = ["SingleEvent", "SummaryRenderer", "build_match", "causal_chain", "describe_event"]
