"""Check a rule's trigger (`when:`): its form (single, correlation, count, absence with `after:`), event kinds,
conditions, `same` and `group_by` fields and window."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuslo.engine.errors import RulebookProblem
from gpuslo.engine.events import KINDS
from gpuslo.engine.rulebook.check_context import CheckContext
from gpuslo.engine.rulebook.expr import KEYWORDS
from gpuslo.engine.rulebook.marked_yaml import Path_
from gpuslo.engine.rulebook.value_checks import duration_problem, field_problems, kind_problem

MAX_WITHIN_S = 86400.0  # the runtime keeps correlation state this long at most
_FORM_KEYS = {
    "single": ({"event"}, {"event", "if"}),
    "correlation": ({"all", "same", "within"}, {"all", "same", "within", "ordered"}),
    "count": ({"count", "event", "within"}, {"count", "event", "if", "same", "within"}),
    "absence": ({"absent", "for"}, {"absent", "if", "same", "for", "after"}),
}
_FORM_NAMES = {"single": "a single-event trigger", "correlation": "a correlation (all:)", "count": "a count",
               "absence": "an absence (absent:)"}


def when_problems(
    ctx: CheckContext, path: Path_, when: object, rule: str | None, group_by: object
) -> Iterator[RulebookProblem]:
    """The trigger's form, kinds, conditions, `same`/`group_by` fields and window."""
    if not isinstance(when, dict):
        return
    doc, form = ctx.doc, _when_form(when)
    yield from _form_problems(ctx, path, when, form, rule)
    kinds: list[str] = []
    if form == "correlation":
        yield from _pattern_problems(ctx, (*path, "all"), when.get("all"), rule, kinds)
    else:
        kind_key = "absent" if form == "absence" else "event"
        yield from kind_problem(doc, (*path, kind_key), when.get(kind_key), rule)
        if when.get(kind_key) in KINDS:
            kinds.append(when[kind_key])
            yield from ctx.condition((*path, "if"), when.get("if"), when[kind_key], {}, rule)
    group_kinds = kinds
    if form == "absence" and isinstance(when.get("after"), dict):
        armed: list[str] = []
        yield from _arming_problems(ctx, (*path, "after"), when["after"], rule, armed)
        # `same` joins both events; the group comes from the arming event, the violation's evidence
        kinds, group_kinds = kinds + armed, armed
    yield from field_problems(doc, (*path, "same"), when.get("same"), kinds, rule)
    yield from field_problems(doc, (*path[:-1], "group_by"), group_by, group_kinds, rule)
    yield from duration_problem(doc, (*path, "within"), when.get("within"), rule, MAX_WITHIN_S)
    yield from duration_problem(doc, (*path, "for"), when.get("for"), rule, MAX_WITHIN_S)


def _when_form(when: dict[str, Any]) -> str:
    if "all" in when:
        return "correlation"
    return "count" if "count" in when else "absence" if "absent" in when else "single"


def _form_problems(
    ctx: CheckContext, path: Path_, when: dict[str, Any], form: str, rule: str | None
) -> Iterator[RulebookProblem]:
    """Trigger keys of another form, and keys this form needs but lacks."""
    required, allowed = _FORM_KEYS[form]
    known = set().union(*(keys for _, keys in _FORM_KEYS.values()))
    for key in when:
        if key in known and key not in allowed:  # unknown keys are the schema's to report
            yield RulebookProblem(
                ctx.doc.at((*path, key), key=True), f"'{key}' does not apply to {_FORM_NAMES[form]}", rule
            )
    for key in sorted(required - set(when)):
        yield RulebookProblem(
            ctx.doc.at(path), f"{_FORM_NAMES[form]} needs '{key}'", rule, _required_hint(form, key, when)
        )


def _required_hint(form: str, key: str, when: dict[str, Any]) -> str | None:
    if (form, key) != ("absence", "for"):
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
            yield RulebookProblem(
                ctx.doc.at((*path, i, "name")), f"pattern name '{name}' is already taken", rule
            )
        yield from kind_problem(ctx.doc, (*path, i, "event"), kind, rule)
        if isinstance(kind, str) and kind in KINDS:
            kinds.append(kind)
            yield from ctx.condition((*path, i, "if"), pattern.get("if"), kind, dict(aliases), rule)
            if isinstance(name, str):
                aliases[name] = kind
