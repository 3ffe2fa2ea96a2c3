"""Check a rulebook document in one walk: structure against schema.json, then meaning (SLOs, triggers, conditions,
summaries, lifecycle), keeping every condition it parses for the build."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpuslo.engine.errors import Location, RulebookProblem
from gpuslo.engine.events import KINDS, field_type
from gpuslo.engine.rulebook.checks import (
    CheckContext,
    did_you_mean,
    duration_problem,
    field_problems,
    kind_problem,
    requires_problems,
    template_problems,
)
from gpuslo.engine.rulebook.expr import KEYWORDS
from gpuslo.engine.rulebook.marked_yaml import Document, Path_
from gpuslo.engine.rulebook.model import CLEAR_ALIAS, Expr
from gpuslo.engine.rulebook.schema_check import schema_problems
from gpuslo.engine.slo.checks import indicator_problems

MAX_WITHIN_S = 86400.0  # the runtime keeps correlation state this long at most
MAX_LIFECYCLE_S = 7 * 86400.0  # repeat_interval, flap_window and resolve.after


@dataclass(frozen=True)
class WhenForm:
    """One form of `when:`: the key that selects it, the keys it needs and allows, and its name in messages."""

    name: str
    selector: str | None  # None: the form of a `when` that has no other form's selector
    kind_key: str | None  # the key naming the event kind (None: the patterns name theirs)
    required: frozenset[str]
    allowed: frozenset[str]
    words: str
    rule_words: str  # the rule it makes, as site override problems say it


# The forms of `when:`, in the order their selectors are tried (the last one is the default).
WHEN_FORMS: tuple[WhenForm, ...] = (
    WhenForm("correlation", "all", None, frozenset({"all", "same", "within"}),
             frozenset({"all", "same", "within", "ordered"}), "a correlation (all:)", "a correlation"),
    WhenForm("count", "count", "event", frozenset({"count", "event", "within"}),
             frozenset({"count", "event", "if", "same", "within"}), "a count", "a count"),
    WhenForm("absence", "absent", "absent", frozenset({"absent", "for"}),
             frozenset({"absent", "if", "same", "for", "after"}), "an absence (absent:)", "an absence rule"),
    WhenForm("single", None, "event", frozenset({"event"}), frozenset({"event", "if"}), "a single-event trigger",
             "a single-event rule"),
)
_TRIGGER_KEYS = frozenset().union(*(form.allowed for form in WHEN_FORMS))


def when_form(when: Mapping[str, Any]) -> WhenForm:
    """The form of a `when:` mapping."""
    return next(form for form in WHEN_FORMS if form.selector is None or form.selector in when)


@dataclass(frozen=True)
class Validation:
    """Every problem of a document, in file order, and each condition that parsed (by path) for the build."""

    problems: list[RulebookProblem]
    conditions: Mapping[Path_, Expr]


def validate(doc: Document) -> Validation:
    """Check structure and meaning together; the problems come in file order."""
    ctx = CheckContext.of(doc) if isinstance(doc.data, dict) else None
    problems = schema_problems(doc) + (list(_document_problems(ctx)) if ctx is not None else [])
    unique = sorted(dict.fromkeys(problems), key=lambda p: (p.location.line or 0, p.location.col or 0))
    return Validation(unique, ctx.conditions if ctx is not None else {})


def _document_problems(ctx: CheckContext) -> Iterator[RulebookProblem]:
    """Problems of meaning: unknown SLOs, kinds and fields, bad conditions, windows, templates, duplicates."""
    doc = ctx.doc
    yield from requires_problems(doc, doc.data.get("requires"))
    for slo_id, slo in ctx.slos.items():
        if isinstance(slo, dict):
            yield from duration_problem(doc, ("slos", slo_id, "window"), slo.get("window"), None)
            yield from indicator_problems(ctx, slo_id, slo)
    for name in ctx.macros:
        if name in KEYWORDS:
            yield RulebookProblem(doc.at(("macros", name), key=True), f"macro name '{name}' is a keyword")
    seen: dict[str, Location] = {}
    rules = doc.data.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, dict):
            yield from _rule_problems(ctx, i, rule, seen)


def _rule_problems(
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
    yield from _when_problems(ctx, (*path, "when"), rule.get("when"), rid, rule.get("group_by"))
    yield from template_problems(doc, (*path, "summary"), rule.get("summary"), rid)
    resolve: dict[str, Any] = rule["resolve"] if isinstance(rule.get("resolve"), dict) else {}
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
    when: dict[str, Any] = rule["when"] if isinstance(rule.get("when"), dict) else {}
    group_by = rule.get("group_by", ["host"])
    keys = group_by if isinstance(group_by, list) and group_by else when.get("same")
    for name in keys if isinstance(keys, list) else []:
        if isinstance(name, str) and field_type(kind, name) is None:
            yield RulebookProblem(doc.at((*path, "event")), f"the clearing event {kind} has no field '{name}' "
                                  "of the rule's group_by, so it cannot name the violation it resolves", rid)
    patterns: list[Any] = when["all"] if isinstance(when.get("all"), list) else []
    if any(isinstance(p, dict) and p.get("name") == CLEAR_ALIAS for p in patterns):
        yield RulebookProblem(doc.at(path, key=True), f"a rule with 'resolve: {{event}}' cannot name a pattern "
                              f"'{CLEAR_ALIAS}' (the clearing pattern takes that name)", rid)


def _when_problems(
    ctx: CheckContext, path: Path_, when: object, rule: str | None, group_by: object
) -> Iterator[RulebookProblem]:
    """The trigger's form, kinds, conditions, `same`/`group_by` fields and window."""
    if not isinstance(when, dict):
        return
    doc, form = ctx.doc, when_form(when)
    yield from _form_problems(ctx, path, when, form, rule)
    kinds: list[str] = []
    if form.kind_key is None:
        yield from _pattern_problems(ctx, (*path, "all"), when.get("all"), rule, kinds)
    else:
        yield from kind_problem(doc, (*path, form.kind_key), when.get(form.kind_key), rule)
        if when.get(form.kind_key) in KINDS:
            kinds.append(when[form.kind_key])
            yield from ctx.condition((*path, "if"), when.get("if"), when[form.kind_key], {}, rule)
    group_kinds = kinds
    if form.name == "absence" and isinstance(when.get("after"), dict):
        armed: list[str] = []
        yield from _arming_problems(ctx, (*path, "after"), when["after"], rule, armed)
        # `same` joins both events; the group comes from the arming event, the violation's evidence
        kinds, group_kinds = kinds + armed, armed
    yield from field_problems(doc, (*path, "same"), when.get("same"), kinds, rule)
    yield from field_problems(doc, (*path[:-1], "group_by"), group_by, group_kinds, rule)
    yield from duration_problem(doc, (*path, "within"), when.get("within"), rule, MAX_WITHIN_S)
    yield from duration_problem(doc, (*path, "for"), when.get("for"), rule, MAX_WITHIN_S)


def _form_problems(
    ctx: CheckContext, path: Path_, when: dict[str, Any], form: WhenForm, rule: str | None
) -> Iterator[RulebookProblem]:
    """Trigger keys of another form, and keys this form needs but lacks."""
    for key in when:
        if key in _TRIGGER_KEYS and key not in form.allowed:  # unknown keys are the schema's to report
            yield RulebookProblem(ctx.doc.at((*path, key), key=True), f"'{key}' does not apply to {form.words}", rule)
    for key in sorted(form.required - set(when)):
        yield RulebookProblem(ctx.doc.at(path), f"{form.words} needs '{key}'", rule, _required_hint(form, key, when))


def _required_hint(form: WhenForm, key: str, when: dict[str, Any]) -> str | None:
    if (form.name, key) != ("absence", "for"):
        return None
    if "after" in when:
        return "e.g. 'for: 10s': how long after the 'after' event the absent event may take"
    return "e.g. 'for: 2m': the silence since the last matching event that fires the rule"


def _arming_problems(
    ctx: CheckContext, path: Path_, arming: dict[str, Any], rule: str | None, kinds: list[str]
) -> Iterator[RulebookProblem]:
    """An absence's `after`: the arming event's kind and condition."""
    kind = arming.get("event")
    yield from kind_problem(ctx.doc, (*path, "event"), kind, rule)
    if isinstance(kind, str) and kind in KINDS:
        kinds.append(kind)
        yield from ctx.condition((*path, "if"), arming.get("if"), kind, {}, rule)


def _pattern_problems(
    ctx: CheckContext, path: Path_, patterns: object, rule: str | None, kinds: list[str]
) -> Iterator[RulebookProblem]:
    """A correlation's `all:` patterns: names not taken twice, kinds, and conditions that may use earlier names."""
    if not isinstance(patterns, list):
        return
    aliases: dict[str, str] = {}
    for i, pattern in enumerate(patterns):
        if not isinstance(pattern, dict):
            continue
        name, kind = pattern.get("name"), pattern.get("event")
        if isinstance(name, str) and (name in aliases or name in KEYWORDS or name == "labels"):
            yield RulebookProblem(ctx.doc.at((*path, i, "name")), f"pattern name '{name}' is already taken", rule)
        yield from kind_problem(ctx.doc, (*path, i, "event"), kind, rule)
        if isinstance(kind, str) and kind in KINDS:
            kinds.append(kind)
            yield from ctx.condition((*path, i, "if"), pattern.get("if"), kind, dict(aliases), rule)
            if isinstance(name, str):
                aliases[name] = kind
