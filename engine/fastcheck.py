"""A fast yes/no check compiled from a JSON Schema: the common path for well-formed events.

It knows only the keywords the event schemas use and refuses to compile any other, so it can never ignore a
constraint; its answers follow jsonschema's Draft 2020-12 semantics (`pattern` is `re.search`, `integer` takes
2.0, `format` is not asserted, size and range keywords skip values of other types). Anything it refuses goes
to jsonschema for the precise problems; tests/engine/test_fastcheck.py fuzzes that the two agree.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[object], bool]

# Annotations only: jsonschema without a format checker does not assert `format` either.
_NOT_ASSERTED = frozenset({"description", "format", "title", "$schema", "$id"})
_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "propertyNames",
                              "maxProperties"})


def _is_integer(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Number)


_TYPES: Mapping[str, Check] = {
    "string": lambda value: isinstance(value, str),
    "integer": _is_integer,
    "number": _is_number,
    "object": lambda value: isinstance(value, dict),
    "null": lambda value: value is None,
}


def _type_check(names: str | list[str]) -> Check:
    tests = tuple(_TYPES[name] for name in ([names] if isinstance(names, str) else names))
    if len(tests) == 1:
        return tests[0]
    return lambda value: any(test(value) for test in tests)


def _range_check(keyword: str, bound: float) -> Check:
    if keyword == "minimum":
        return lambda value: not _is_number(value) or not value < bound  # type: ignore[operator]
    return lambda value: not _is_number(value) or not value > bound  # type: ignore[operator]


def _string_check(keyword: str, limit: Any) -> Check:
    if keyword == "pattern":
        search = re.compile(limit).search
        return lambda value: not isinstance(value, str) or search(value) is not None
    if keyword == "minLength":
        return lambda value: not isinstance(value, str) or len(value) >= limit
    return lambda value: not isinstance(value, str) or len(value) <= limit


def _enum_check(allowed: list[Any]) -> Check:
    if not all(isinstance(item, str) for item in allowed):
        raise ValueError("fast check: only enums of strings are supported")
    choices = frozenset(allowed)
    return lambda value: isinstance(value, str) and value in choices


def _object_check(schema: Mapping[str, Any]) -> Check:
    properties = {name: compile_check(sub) for name, sub in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    extra_check: Check | None = None if extra is True else (
        (lambda _value: False) if extra is False else compile_check(extra))
    names = compile_check(schema["propertyNames"]) if "propertyNames" in schema else None
    max_properties = schema.get("maxProperties")

    def check(value: object) -> bool:
        if not isinstance(value, dict):
            return True  # object keywords skip other types; `type` decides about them
        if max_properties is not None and len(value) > max_properties:
            return False
        for name in required:
            if name not in value:
                return False
        for key, item in value.items():
            sub = properties.get(key)
            if sub is None:
                if extra_check is not None and not extra_check(item):
                    return False
            elif not sub(item):
                return False
            if names is not None and not names(key):
                return False
        return True

    return check


def compile_check(schema: Mapping[str, Any]) -> Check:
    """A function telling whether a value is valid against `schema`; ValueError for an unsupported keyword."""
    checks: list[Check] = []
    for keyword, value in schema.items():
        if keyword in _NOT_ASSERTED or keyword in _OBJECT_KEYWORDS:
            continue
        if keyword == "type":
            checks.insert(0, _type_check(value))
        elif keyword == "enum":
            checks.append(_enum_check(value))
        elif keyword in ("minimum", "maximum"):
            checks.append(_range_check(keyword, value))
        elif keyword in ("pattern", "minLength", "maxLength"):
            checks.append(_string_check(keyword, value))
        else:
            raise ValueError(f"fast check: unsupported JSON Schema keyword {keyword!r}")
    if _OBJECT_KEYWORDS & schema.keys():
        checks.append(_object_check(schema))
    if not checks:
        return lambda _value: True
    if len(checks) == 1:
        return checks[0]
    first, *rest = checks

    def check_all(value: object) -> bool:
        if not first(value):
            return False
        for check in rest:
            if not check(value):
                return False
        return True

    return check_all
