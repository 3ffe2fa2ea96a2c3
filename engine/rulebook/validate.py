"""Check a loaded rulebook document: structure against schema.json, then meaning (references, kinds)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from functools import cache
from importlib import metadata, resources
from typing import Any

import jinja2
import jinja2.meta
import jsonschema

from gpuslo.engine.errors import Location, RulebookError, RulebookProblem
from gpuslo.engine.events import ENVELOPE_FIELDS, KIND_ATTRS, KINDS, field_type
from gpuslo.engine.rulebook.expr import KEYWORDS, parse_expression
from gpuslo.engine.rulebook.loader import Document, Path_
from gpuslo.engine.rulebook.model import CLEAR_ALIAS
from gpuslo.engine.templates import summary_environment
from gpuslo.engine.units import parse_duration

MAX_WITHIN_S = 86400.0  # the runtime keeps correlation state this long at most
MAX_LIFECYCLE_S = 7 * 86400.0  # repeat_interval, flap_window and resolve.after
TEMPLATE_NAMES = ("event", "group", "collective")  # collective: gpuslo.engine.collectives, None if no hang
_NAME_RULE = "lowercase letters, digits, '-' and '_', starting with a letter or digit"
_JSON_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a mapping",
    "array": "a list",
}
_ARMING = "after: {event: KIND, if: CONDITION}"  # the form of an absence's arming event
_REQUIRES = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*")


@cache
def _validator() -> jsonschema.Draft202012Validator:
    text = resources.files("gpuslo.engine.rulebook").joinpath("schema.json").read_text("utf-8")
    return jsonschema.Draft202012Validator(json.loads(text))


def rulebook_json_schema() -> dict[str, Any]:
    """The JSON Schema of a rulebook's structure (package data `schema.json`)."""
    return dict(_validator().schema)


def _hint(word: object, options: Any) -> str | None:
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f"did you mean '{close[0]}'?" if close else None


def _rule_id(doc: Document, path: Path_) -> str | None:
    if len(path) >= 2 and path[0] == "rules" and isinstance(doc.data, dict):
        rules = doc.data.get("rules")
        if isinstance(rules, list) and isinstance(path[1], int) and path[1] < len(rules):
            rule = rules[path[1]]
            if isinstance(rule, dict) and isinstance(rule.get("id"), str):
                return str(rule["id"])
    return None


def _schema_problem(doc: Document, error: jsonschema.ValidationError) -> Iterator[RulebookProblem]:
    path: Path_ = tuple(error.absolute_path)
    rule = _rule_id(doc, path)
    label = next((str(p) for p in reversed(path) if isinstance(p, str)), "rulebook")
    kind, value, instance = error.validator, error.validator_value, error.instance
    if kind == "additionalProperties":
        allowed = error.schema.get("properties", {})
        for extra in sorted(
            set(instance) - set(allowed), key=lambda k: doc.at((*path, k), key=True).line or 0
        ):
            yield RulebookProblem(
                doc.at((*path, extra), key=True),
                f"unknown field '{extra}'",
                rule,
                _hint(extra, allowed) or f"allowed: {', '.join(allowed)}",
            )
        return
    where = doc.at(path)
    if kind == "required":
        missing = error.message.split("'")[1]
        yield RulebookProblem(where, f"missing required field '{missing}'", rule, _ARMING if label == "after" else None)
    elif kind == "enum":
        yield RulebookProblem(
            where, f"{label} {instance!r} must be one of {', '.join(value)}", rule, _hint(instance, value)
        )
    elif kind == "type":
        types = [value] if isinstance(value, str) else value
        words = " or ".join(_JSON_TYPE_WORDS.get(t, t) for t in types)
        hint = "quote it" if "string" in types and isinstance(instance, int | float) else None
        if label == "after" and "object" in types:  # `when.after` names an event; resolve's `after` is a duration
            hint = f"{_ARMING} names the arming event; the time it allows is 'for'"
        yield RulebookProblem(where, f"'{label}' must be {words}, got {instance!r}", rule, hint)
    elif kind == "pattern" and value.startswith("^[a-z0-9]"):
        where = doc.at((*path, instance), key=True) if (*path, instance) in doc.key_marks else where
        yield RulebookProblem(where, f"name {instance!r} must use {_NAME_RULE}", rule)
    elif kind == "pattern" and value.startswith("^[A-Za-z_]"):
        where = doc.at((*path, instance), key=True) if (*path, instance) in doc.key_marks else where
        yield RulebookProblem(where, f"name {instance!r} must be an identifier (letters, digits, '_')", rule)
    elif kind == "pattern" and label == "runbook":
        yield RulebookProblem(where, f"runbook {instance!r} must be an http(s) URL", rule)
    else:
        yield RulebookProblem(where, f"'{label}': {error.message}", rule)


def schema_problems(doc: Document) -> list[RulebookProblem]:
    """Structural problems: unknown or missing fields, wrong types, bad names and severities."""
    if not isinstance(doc.data, dict):
        return [
            RulebookProblem(
                doc.at(()), "a rulebook must be a YAML mapping with 'rulebook', 'version', 'slos' and 'rules'"
            )
        ]
    problems: list[RulebookProblem] = []
    for error in _validator().iter_errors(doc.data):
        problems.extend(_schema_problem(doc, error))
    return problems


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def _requires_problems(doc: Document, requires: object) -> Iterator[RulebookProblem]:
    if not isinstance(requires, str):
        return
    where = doc.at(("requires",))
    try:
        current = _version_tuple(metadata.version("gpuslo"))
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return
    checks = {
        ">=": tuple.__ge__,
        "<=": tuple.__le__,
        "==": tuple.__eq__,
        "!=": tuple.__ne__,
        ">": tuple.__gt__,
        "<": tuple.__lt__,
    }
    for part in requires.split(","):
        match = _REQUIRES.fullmatch(part)
        if not match:
            yield RulebookProblem(where, f"requires {requires!r} is not a version range", hint="e.g. '>=0.1'")
            return
        op, wanted = match.groups()
        want = _version_tuple(wanted)
        width = max(len(want), len(current))
        if not checks[op](current + (0,) * (width - len(current)), want + (0,) * (width - len(want))):
            yield RulebookProblem(
                where, f"this rulebook requires gpuslo {requires}, but this is {'.'.join(map(str, current))}"
            )


def _duration_problem(
    doc: Document, path: Path_, value: object, rule: str | None, limit: float | None = None
) -> Iterator[RulebookProblem]:
    if not isinstance(value, str):
        return
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        yield RulebookProblem(doc.at(path), str(exc), rule)
        return
    if seconds <= 0 or (limit is not None and seconds > limit):
        yield RulebookProblem(
            doc.at(path), f"'{path[-1]}' must be above 0 and at most {limit:g}s, got {value}", rule
        )


def expression_location(doc: Document, path: Path_) -> tuple[Location, bool]:
    """Where a condition's text begins, and whether its columns can be trusted (one line, not a block)."""
    where = doc.at(path)
    if doc.styles.get(path) in ('"', "'") and where.col is not None:
        where = replace(where, col=where.col + 1)
    return where, path not in doc.multiline


class _Context:
    """What rule checks share: the document, and the rulebook's SLOs, lists and macros."""

    def __init__(self, doc: Document):
        data = doc.data
        self.doc = doc
        self.slos = data.get("slos") if isinstance(data.get("slos"), dict) else {}
        self.lists = {k: tuple(v) for k, v in (data.get("lists") or {}).items() if isinstance(v, list)}
        self.macros = {k: v for k, v in (data.get("macros") or {}).items() if isinstance(v, str)}

    def condition(
        self, path: Path_, text: object, kind: str, aliases: Mapping[str, str], rule: str | None
    ) -> Iterator[RulebookProblem]:
        if not isinstance(text, str) or kind not in KINDS:
            return
        where, exact = expression_location(self.doc, path)
        try:
            parse_expression(
                text,
                kind,
                location=where,
                aliases=aliases,
                macros=self.macros,
                lists=self.lists,
                exact_columns=exact,
            )
        except RulebookError as exc:
            yield from (replace(p, rule_id=rule) for p in exc.problems)


def _kind_problem(doc: Document, path: Path_, kind: object, rule: str | None) -> Iterator[RulebookProblem]:
    if isinstance(kind, str) and kind not in KINDS:
        yield RulebookProblem(
            doc.at(path),
            f"unknown event kind '{kind}'",
            rule,
            _hint(kind, KINDS) or f"known: {', '.join(KINDS)}",
        )


def _field_problems(
    doc: Document, path: Path_, names: object, kinds: list[str], rule: str | None
) -> Iterator[RulebookProblem]:
    if not isinstance(names, list):
        return
    for i, name in enumerate(names):
        for kind in kinds:
            if isinstance(name, str) and field_type(kind, name) is None:
                yield RulebookProblem(
                    doc.at((*path, i)),
                    f"unknown field '{name}' for event {kind} in '{path[-1]}'",
                    rule,
                    _hint(name, _kind_fields(kind)),
                )
                break


def _kind_fields(kind: str) -> list[str]:
    return [*ENVELOPE_FIELDS, *KIND_ATTRS.get(kind, {})]


_FORM_KEYS = {
    "single": ({"event"}, {"event", "if"}),
    "correlation": ({"all", "same", "within"}, {"all", "same", "within", "ordered"}),
    "count": ({"count", "event", "within"}, {"count", "event", "if", "same", "within"}),
    "absence": ({"absent", "for"}, {"absent", "if", "same", "for", "after"}),
}
_FORM_NAMES = {"single": "a single-event trigger", "correlation": "a correlation (all:)", "count": "a count",
               "absence": "an absence (absent:)"}


def _when_form(when: dict[str, Any]) -> str:
    if "all" in when:
        return "correlation"
    return "count" if "count" in when else "absence" if "absent" in when else "single"


def _when_problems(
    ctx: _Context, path: Path_, when: object, rule: str | None, group_by: object
) -> Iterator[RulebookProblem]:
    """The trigger's form, kinds, conditions, `same`/`group_by` fields and window."""
    if not isinstance(when, dict):
        return
    doc, form = ctx.doc, _when_form(when)
    required, allowed = _FORM_KEYS[form]
    known = set().union(*(keys for _, keys in _FORM_KEYS.values()))
    for key in when:
        if key in known and key not in allowed:  # unknown keys are the schema's to report
            yield RulebookProblem(
                doc.at((*path, key), key=True), f"'{key}' does not apply to {_FORM_NAMES[form]}", rule
            )
    for key in sorted(required - set(when)):
        yield RulebookProblem(doc.at(path), f"{_FORM_NAMES[form]} needs '{key}'", rule, _required_hint(form, key, when))
    kinds: list[str] = []
    if form == "correlation":
        yield from _pattern_problems(ctx, (*path, "all"), when.get("all"), rule, kinds)
    else:
        kind_key = "absent" if form == "absence" else "event"
        yield from _kind_problem(doc, (*path, kind_key), when.get(kind_key), rule)
        if when.get(kind_key) in KINDS:
            kinds.append(when[kind_key])
            yield from ctx.condition((*path, "if"), when.get("if"), when[kind_key], {}, rule)
    group_kinds = kinds
    if form == "absence" and isinstance(when.get("after"), dict):
        armed: list[str] = []
        yield from _arming_problems(ctx, (*path, "after"), when["after"], rule, armed)
        # `same` joins both events; the group comes from the arming event, the violation's evidence
        kinds, group_kinds = kinds + armed, armed
    yield from _field_problems(doc, (*path, "same"), when.get("same"), kinds, rule)
    yield from _field_problems(doc, (*path[:-1], "group_by"), group_by, group_kinds, rule)
    yield from _duration_problem(doc, (*path, "within"), when.get("within"), rule, MAX_WITHIN_S)
    yield from _duration_problem(doc, (*path, "for"), when.get("for"), rule, MAX_WITHIN_S)


def _required_hint(form: str, key: str, when: dict[str, Any]) -> str | None:
    if (form, key) != ("absence", "for"):
        return None
    if "after" in when:
        return "e.g. 'for: 10s': how long after the 'after' event the absent event may take"
    return "e.g. 'for: 2m': the silence since the last matching event that fires the rule"


def _arming_problems(
    ctx: _Context, path: Path_, arming: dict[str, Any], rule: str | None, kinds: list[str]
) -> Iterator[RulebookProblem]:
    """An absence's `after`: the arming event's kind and condition."""
    kind = arming.get("event")
    yield from _kind_problem(ctx.doc, (*path, "event"), kind, rule)
    if isinstance(kind, str) and kind in KINDS:
        kinds.append(kind)
        yield from ctx.condition((*path, "if"), arming.get("if"), kind, {}, rule)


def _pattern_problems(
    ctx: _Context, path: Path_, patterns: object, rule: str | None, kinds: list[str]
) -> Iterator[RulebookProblem]:
    if not isinstance(patterns, list):
        return
    aliases: dict[str, str] = {}
    for i, pattern in enumerate(patterns):
        if not isinstance(pattern, dict):
            continue
        name, kind = pattern.get("name"), pattern.get("event")
        if name in aliases or name in KEYWORDS or name == "labels":
            yield RulebookProblem(
                ctx.doc.at((*path, i, "name")), f"pattern name '{name}' is already taken", rule
            )
        yield from _kind_problem(ctx.doc, (*path, i, "event"), kind, rule)
        if isinstance(kind, str) and kind in KINDS:
            kinds.append(kind)
            yield from ctx.condition((*path, i, "if"), pattern.get("if"), kind, dict(aliases), rule)
            if isinstance(name, str):
                aliases[name] = kind


def _template_problems(
    doc: Document, path: Path_, text: object, rule: str | None
) -> Iterator[RulebookProblem]:
    if not isinstance(text, str):
        return
    env = summary_environment()
    try:
        tree = env.parse(text)
        undeclared = jinja2.meta.find_undeclared_variables(tree)  # also checks that every filter exists
    except jinja2.TemplateError as exc:  # syntax errors, and assertions such as an unknown filter
        line = getattr(exc, "lineno", None)
        where = f" (template line {line})" if line else ""
        yield RulebookProblem(doc.at(path), f"summary template: {exc.message}{where}", rule)
        return
    for name in sorted(undeclared - set(TEMPLATE_NAMES)):
        yield RulebookProblem(
            doc.at(path),
            f"summary template uses unknown variable '{name}' (known: {', '.join(TEMPLATE_NAMES)})",
            rule,
            _hint(name, TEMPLATE_NAMES),
        )


def _rule_problems(
    ctx: _Context, i: int, rule: dict[str, Any], seen: dict[str, Location]
) -> Iterator[RulebookProblem]:
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
            _hint(slo, ctx.slos) or f"define it under 'slos' (known: {', '.join(ctx.slos)})",
        )
    yield from _when_problems(ctx, (*path, "when"), rule.get("when"), rid, rule.get("group_by"))
    yield from _template_problems(doc, (*path, "summary"), rule.get("summary"), rid)
    resolve = rule.get("resolve") if isinstance(rule.get("resolve"), dict) else {}
    lifecycle = {("repeat_interval",): rule.get("repeat_interval"), ("flap_window",): rule.get("flap_window"),
                 ("resolve", "after"): resolve.get("after")}
    for where, value in lifecycle.items():
        yield from _duration_problem(doc, (*path, *where), value, rid, MAX_LIFECYCLE_S)
    if isinstance(rule.get("resolve"), dict):
        yield from _resolve_problems(ctx, (*path, "resolve"), rule, rid)


def _resolve_problems(ctx: _Context, path: Path_, rule: dict[str, Any], rid: str | None) -> Iterator[RulebookProblem]:
    """`resolve:` needs `after` or `event`; the clearing event's kind, condition and group_by fields."""
    doc, resolve = ctx.doc, rule["resolve"]
    if "after" not in resolve and "event" not in resolve:
        yield RulebookProblem(doc.at(path, key=True), "'resolve' needs 'after', 'event' or both", rid)
    if "if" in resolve and "event" not in resolve:
        yield RulebookProblem(doc.at((*path, "if"), key=True), "'if' in 'resolve' needs 'event'", rid)
    kind = resolve.get("event")
    if kind is None:
        return
    yield from _kind_problem(doc, (*path, "event"), kind, rid)
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


def semantic_problems(doc: Document) -> list[RulebookProblem]:
    """Problems of meaning: unknown SLOs, kinds and fields, bad conditions, windows, templates, duplicates."""
    if not isinstance(doc.data, dict):
        return []
    ctx, problems = _Context(doc), []
    problems.extend(_requires_problems(doc, doc.data.get("requires")))
    for slo_id, slo in ctx.slos.items():
        if isinstance(slo, dict):
            problems.extend(_duration_problem(doc, ("slos", slo_id, "window"), slo.get("window"), None))
    for name in ctx.macros:
        if name in KEYWORDS:
            problems.append(
                RulebookProblem(doc.at(("macros", name), key=True), f"macro name '{name}' is a keyword")
            )
    seen: dict[str, Location] = {}
    rules = doc.data.get("rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, dict):
            problems.extend(_rule_problems(ctx, i, rule, seen))
    return problems


def validate(doc: Document) -> list[RulebookProblem]:
    """Every problem of the document, in file order (structure and meaning together)."""
    problems = schema_problems(doc) + semantic_problems(doc)
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.location.line or 0, p.location.col or 0))
