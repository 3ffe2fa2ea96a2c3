"""Check a rulebook document's structure against the JSON Schema shipped as package data (`schema.json`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from gpuslo.engine.errors import Location, RulebookProblem
from gpuslo.engine.rulebook.checks import did_you_mean
from gpuslo.engine.rulebook.marked_yaml import Document, Path_

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


@cache
def _validator() -> jsonschema.Draft202012Validator:
    text = resources.files("gpuslo.engine.rulebook").joinpath("schema.json").read_text("utf-8")
    return jsonschema.Draft202012Validator(json.loads(text))


def rulebook_json_schema() -> dict[str, Any]:
    """The JSON Schema of a rulebook's structure (package data `schema.json`)."""
    return dict(_validator().schema)


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
        yield from _unknown_field_problems(doc, path, error, rule)
        return
    where = doc.at(path)
    if kind == "required":
        missing = error.message.split("'")[1]
        yield RulebookProblem(where, f"missing required field '{missing}'", rule, _ARMING if label == "after" else None)
    elif kind == "enum":
        yield RulebookProblem(
            where, f"{label} {instance!r} must be one of {', '.join(value)}", rule, did_you_mean(instance, value)
        )
    elif kind == "type":
        yield _type_problem(where, label, value, instance, rule)
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


def _unknown_field_problems(
    doc: Document, path: Path_, error: jsonschema.ValidationError, rule: str | None
) -> Iterator[RulebookProblem]:
    allowed = error.schema.get("properties", {})
    for extra in sorted(set(error.instance) - set(allowed), key=lambda k: doc.at((*path, k), key=True).line or 0):
        yield RulebookProblem(
            doc.at((*path, extra), key=True),
            f"unknown field '{extra}'",
            rule,
            did_you_mean(extra, allowed) or f"allowed: {', '.join(allowed)}",
        )


def _type_problem(where: Location, label: str, value: Any, instance: object, rule: str | None) -> RulebookProblem:
    types = [value] if isinstance(value, str) else value
    words = " or ".join(_JSON_TYPE_WORDS.get(t, t) for t in types)
    hint = "quote it" if "string" in types and isinstance(instance, int | float) else None
    if label == "after" and "object" in types:  # `when.after` names an event; resolve's `after` is a duration
        hint = f"{_ARMING} names the arming event; the time it allows is 'for'"
    return RulebookProblem(where, f"'{label}' must be {words}, got {instance!r}", rule, hint)
