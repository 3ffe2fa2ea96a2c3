"""Check one rule's meaning: a unique id, a known SLO, its trigger, summary, lifecycle durations and `resolve:`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuslo.engine.errors import Location, RulebookProblem
from gpuslo.engine.events import KINDS, field_type
from gpuslo.engine.rulebook.check_context import CheckContext
from gpuslo.engine.rulebook.hints import did_you_mean
from gpuslo.engine.rulebook.marked_yaml import Path_
from gpuslo.engine.rulebook.model import CLEAR_ALIAS
from gpuslo.engine.rulebook.template_check import template_problems
from gpuslo.engine.rulebook.trigger_checks import when_problems
from gpuslo.engine.rulebook.value_checks import duration_problem, kind_problem

MAX_LIFECYCLE_S = 7 * 86400.0  # repeat_interval, flap_window and resolve.after


def rule_problems(
    ctx: CheckContext, i: int, rule: dict[str, Any], seen: dict[str, Location]
) -> Iterator[RulebookProblem]:
    """The problems of `rules[i]`; `seen` maps the rule ids met so far to where they are, and gains this one."""
    doc, path = ctx.doc, ("rules", i)
    rid = rule.get("id") if isinstance(rule.get("id"), str) else None
    if rid is not None and rid in seen:
        yield RulebookProblem(
            doc.at((*path, "id")), f"duplicate rule id '{rid}' (first at line {seen[rid].line})", rid
        )
    elif rid is not None:
        seen[rid] = doc.at((*path, "id"))
    slo = rule.get("slo")
    if isinstance(slo, str) and slo not in ctx.slos:
        yield RulebookProblem(
            doc.at((*path, "slo")),
            f"unknown SLO '{slo}'",
            rid,
            did_you_mean(slo, ctx.slos) or f"define it under 'slos' (known: {', '.join(ctx.slos)})",
        )
    yield from when_problems(ctx, (*path, "when"), rule.get("when"), rid, rule.get("group_by"))
    yield from template_problems(doc, (*path, "summary"), rule.get("summary"), rid)
    resolve = rule.get("resolve") if isinstance(rule.get("resolve"), dict) else {}
    lifecycle = {("repeat_interval",): rule.get("repeat_interval"), ("flap_window",): rule.get("flap_window"),
                 ("resolve", "after"): resolve.get("after")}
    for where, value in lifecycle.items():
        yield from duration_problem(doc, (*path, *where), value, rid, MAX_LIFECYCLE_S)
    if isinstance(rule.get("resolve"), dict):
        yield from _resolve_problems(ctx, (*path, "resolve"), rule, rid)


def _resolve_problems(
    ctx: CheckContext, path: Path_, rule: dict[str, Any], rid: str | None
) -> Iterator[RulebookProblem]:
    """`resolve:` needs `after` or `event`; the clearing event's kind, condition and group_by fields."""
    doc, resolve = ctx.doc, rule["resolve"]
    if "after" not in resolve and "event" not in resolve:
        yield RulebookProblem(doc.at(path, key=True), "'resolve' needs 'after', 'event' or both", rid)
    if "if" in resolve and "event" not in resolve:
        yield RulebookProblem(doc.at((*path, "if"), key=True), "'if' in 'resolve' needs 'event'", rid)
    kind = resolve.get("event")
    if kind is None:
        return
    yield from kind_problem(doc, (*path, "event"), kind, rid)
    if not isinstance(kind, str) or kind not in KINDS:
        return
    yield from ctx.condition((*path, "if"), resolve.get("if"), kind, {}, rid)
    when = rule.get("when") if isinstance(rule.get("when"), dict) else {}
    group_by = rule.get("group_by", ["host"])
    keys = group_by if isinstance(group_by, list) and group_by else when.get("same")
    for name in keys if isinstance(keys, list) else []:
        if isinstance(name, str) and field_type(kind, name) is None:
            yield RulebookProblem(doc.at((*path, "event")), f"the clearing event {kind} has no field '{name}' "
                                  "of the rule's group_by, so it cannot name the violation it resolves", rid)
    patterns = when.get("all") if isinstance(when.get("all"), list) else []
    if any(isinstance(p, dict) and p.get("name") == CLEAR_ALIAS for p in patterns):
        yield RulebookProblem(doc.at(path, key=True), f"a rule with 'resolve: {{event}}' cannot name a pattern "
                              f"'{CLEAR_ALIAS}' (the clearing pattern takes that name)", rid)
