"""A fast yes/no check compiled from a JSON Schema: the common path for well-formed events.

It knows only the keywords the event schemas use and refuses to compile any other, so it can never ignore a
constraint; its answers follow jsonschema's Draft 2020-12 semantics (`pattern` is `re.search`, `integer` takes
2.0, `format` is not asserted, size and range keywords skip values of other types). Anything it refuses goes
to jsonschema for the precise problems; tests/engine/test_fastcheck.py fuzzes that the two agree.

The schema becomes the source of one flat Python function (as dataclasses build `__init__`): a property costs
a dict lookup and a few inline tests instead of a call per keyword, which is most of ingest's validation time.
"""

from __future__ import annotations

import functools
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[object], bool]

# Annotations only: jsonschema without a format checker does not assert `format` either.
_NOT_ASSERTED = frozenset({"description", "format", "title", "$schema", "$id"})
_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties", "propertyNames",
                              "maxProperties"})
_MISSING = object()


def _is_integer(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Number)


# Each test is an expression on `{v}`; the exact types JSON decodes to go first, the general test after.
_TYPE_TESTS: Mapping[str, str] = {
    "string": "isinstance({v}, str)",
    "integer": "(type({v}) is int or _is_integer({v}))",
    "number": "(type({v}) is int or type({v}) is float or _is_number({v}))",
    "object": "isinstance({v}, dict)",
    "null": "{v} is None",
}


class _Writer:
    """Collects the generated lines and the constants (patterns, sets) they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {"_is_integer": _is_integer, "_is_number": _is_number,
                                          "_MISSING": _MISSING}
        self._names = 0

    def constant(self, value: object) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def variable(self) -> str:
        self._names += 1
        return f"v{self._names}"

    def require(self, condition: str, depth: int) -> None:
        self.lines.append(f"{'    ' * depth}if not ({condition}): return False")

    def line(self, text: str, depth: int) -> None:
        self.lines.append(f"{'    ' * depth}{text}")

    def block(self, header: str, depth: int, body: Callable[[int], None]) -> None:
        """`header:` followed by what `body` writes one level deeper (`pass` when it writes nothing)."""
        self.line(f"{header}:", depth)
        start = len(self.lines)
        body(depth + 1)
        if len(self.lines) == start:
            self.line("pass", depth + 1)


def _keyword_test(writer: _Writer, keyword: str, limit: Any, v: str) -> str:
    """The expression one value keyword asserts on `v`; ValueError for a keyword the check does not know."""
    if keyword == "type":
        names = [limit] if isinstance(limit, str) else limit
        return " or ".join(_TYPE_TESTS[name].format(v=v) for name in names)
    if keyword == "enum":
        if not all(isinstance(item, str) for item in limit):
            raise ValueError("fast check: only enums of strings are supported")
        return f"isinstance({v}, str) and {v} in {writer.constant(frozenset(limit))}"
    if keyword in ("minimum", "maximum"):
        is_number = _TYPE_TESTS["number"].format(v=v)
        beyond = "<" if keyword == "minimum" else ">"
        return f"not {is_number} or not {v} {beyond} {writer.constant(limit)}"
    if keyword == "pattern":
        return f"not isinstance({v}, str) or {writer.constant(re.compile(limit).search)}({v}) is not None"
    if keyword in ("minLength", "maxLength"):
        within = ">=" if keyword == "minLength" else "<="
        return f"not isinstance({v}, str) or len({v}) {within} {writer.constant(limit)}"
    raise ValueError(f"fast check: unsupported JSON Schema keyword {keyword!r}")


def _emit(writer: _Writer, schema: Mapping[str, Any], v: str, depth: int) -> None:
    """Lines that return False unless `v` is valid against `schema` (the type keyword tested first)."""
    keywords = sorted((k for k in schema if k not in _NOT_ASSERTED and k not in _OBJECT_KEYWORDS),
                      key=lambda k: k != "type")
    for keyword in keywords:
        writer.require(_keyword_test(writer, keyword, schema[keyword], v), depth)
    if _OBJECT_KEYWORDS & schema.keys():
        _emit_object(writer, schema, v, depth)


def _emit_object(writer: _Writer, schema: Mapping[str, Any], v: str, depth: int) -> None:
    """The object keywords, which skip values that are not objects (`type` decides about those)."""
    writer.block(f"if isinstance({v}, dict)", depth, lambda inner: _emit_members(writer, schema, v, inner))


def _emit_members(writer: _Writer, schema: Mapping[str, Any], v: str, depth: int) -> None:
    if "maxProperties" in schema:
        writer.require(f"len({v}) <= {writer.constant(schema['maxProperties'])}", depth)
    for name in schema.get("required", ()):
        writer.require(f"{writer.constant(name)} in {v}", depth)
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name, sub in properties.items():
        item = writer.variable()
        writer.line(f"{item} = {v}.get({writer.constant(name)}, _MISSING)", depth)
        writer.block(f"if {item} is not _MISSING", depth, functools.partial(_emit, writer, sub, item))
    known = writer.constant(frozenset(properties))
    extra = schema.get("additionalProperties", True)
    if extra is False:
        writer.require(f"{known}.issuperset({v})", depth)
    elif extra is not True:
        key, item = writer.variable(), writer.variable()
        writer.line(f"for {key}, {item} in {v}.items():", depth)
        writer.block(f"if {key} not in {known}", depth + 1, lambda inner: _emit(writer, extra, item, inner))
    if "propertyNames" in schema:
        key = writer.variable()
        writer.block(f"for {key} in {v}", depth, lambda inner: _emit(writer, schema["propertyNames"], key, inner))


def compile_check(schema: Mapping[str, Any]) -> Check:
    """A function telling whether a value is valid against `schema`; ValueError for an unsupported keyword."""
    writer = _Writer()
    writer.line("def check(v0):", 0)
    _emit(writer, schema, "v0", 1)
    writer.line("return True", 1)
    namespace = dict(writer.constants)
    exec(compile("\n".join(writer.lines), "<fastcheck>", "exec"), namespace)  # noqa: S102  # our own source
    check: Check = namespace["check"]
    return check
