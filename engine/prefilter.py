"""Which events no pattern of a plan can take, decided before their fact is built and asserted.

Most events a rulebook reads match none of its patterns (a healthy token window under an ITL threshold): their
fact is built, encoded, asserted and refused by the C core for nothing (bench/engine.py's mixed stream: two of
three facts). A pattern's test is an AllOf of its kind and its condition (plan.py); the tests every match needs
are those reached through AllOf alone. An event is skipped only when every pattern of its kind has such a test
that certainly fails on it, judged the way the core judges it:

- a missing field (None: the fact leaves it out) fails every comparison (operators.holds, "as in the engine");
- a number (int or float, not bool; finite; an int within ±2**53, exact as a double) against a number, or a
  string against a string for `eq`/`ne`, is compared as Python compares them.

Anything else (a text test's derived key, a join `KeyOf`, `exists`/`missing`, AnyOf branches, a string against
a number, a bool, NaN, a huge int) is left to the core: the filter can only say "certainly not", never "yes".
tests/engine/test_fact_prefilter.py checks that against the real core on generated facts.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType, MappingProxyType
from typing import Any

from gpuslo.engine.events import Event
from gpuslo.engine.facts import FactFields
from gpuslo.engine.plan import AllOf, KeyOf, Node, Plan, Test

_COMPARE: Mapping[str, Callable[[Any, Any], bool]] = MappingProxyType({
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge})
_EXACT_INT = 2 ** 53
ENVELOPE, LABELS, ATTRS = range(3)


@dataclass(frozen=True)
class Needed:
    """A test every match of one pattern needs: the event field (where the fact copies it from) and the test."""

    source: int  # ENVELOPE, LABELS or ATTRS
    name: str
    cmp: str  # eq ne lt le gt ge
    value: float | int | str
    numeric: bool  # the value is a number: only a number is judged against it

    def holds(self, observed: Any) -> bool:
        return _COMPARE[self.cmp](observed, self.value)


def _number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -_EXACT_INT <= value <= _EXACT_INT
    return isinstance(value, float) and math.isfinite(value)


def fails(needed: Needed, observed: object) -> bool:
    """Whether the test certainly fails on the observed value (None: the field is missing)."""
    if observed is None:
        return True
    if needed.numeric:
        return _number(observed) and not needed.holds(observed)
    return isinstance(observed, str) and not needed.holds(observed)


def _needed(node: Node, where: Mapping[str, tuple[int, str]]) -> list[Needed]:
    if isinstance(node, AllOf):
        return [needed for item in node.items for needed in _needed(item, where)]
    if not isinstance(node, Test) or node.cmp not in _COMPARE or isinstance(node.value, KeyOf):
        return []
    place, value = where.get(node.key), node.value
    if place is None:  # kind, ts or a text test's derived key: not read from the event as it is
        return []
    if _number(value):
        return [Needed(place[0], place[1], node.cmp, value, True)]  # type: ignore[arg-type]
    if isinstance(value, str) and node.cmp in ("eq", "ne"):
        return [Needed(place[0], place[1], node.cmp, value, False)]
    return []


def _kind(node: Node) -> str | None:
    first = node.items[0] if isinstance(node, AllOf) and node.items else node
    return first.value if isinstance(first, Test) and first.key == "kind" and first.cmp == "eq" else None  # type: ignore[return-value]


_OPS: Mapping[str, str] = MappingProxyType({"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="})
_READ = ("getattr(event, {name!r})", "event.labels.get({name!r})", "event.attrs.get({name!r})")


def _source(patterns: Mapping[str, tuple[tuple[Needed, ...], ...]]) -> tuple[str, dict[str, Any]]:
    """One function per kind, as Python source (fastcheck.py does the same for schemas): each pattern's tests
    inline, so that the common event costs a few lookups and comparisons, not a call per test."""
    lines: list[str] = []
    namespace: dict[str, Any] = {"B": _EXACT_INT, "INF": math.inf}
    for number, (kind, alternatives) in enumerate(sorted(patterns.items())):
        lines.append(f"def may_match_{number}(event):")
        for alternative in alternatives:
            lines.append("    while True:  # one pattern: `break` when a needed test certainly fails")
            for needed in alternative:
                constant = f"c{len(namespace)}"
                namespace[constant] = needed.value
                lines.append(f"        v = {_READ[needed.source].format(name=needed.name)}")
                lines.append("        if v is None: break")
                if needed.numeric:
                    lines.append("        t = type(v)")
                    lines.append(f"        if ((t is int and -B <= v <= B) or (t is float and -INF < v < INF)) "
                                 f"and not (v {_OPS[needed.cmp]} {constant}): break")
                else:
                    lines.append(f"        if type(v) is str and not (v {_OPS[needed.cmp]} {constant}): break")
            lines.append("        return True  # this pattern may hold: the core decides")
        lines.append("    return False")
        namespace[f"kind_{number}"] = kind
    lines.append("TABLE = {" + ", ".join(f"kind_{n}: may_match_{n}" for n in range(len(patterns))) + "}")
    return "\n".join(lines), namespace


@functools.lru_cache(maxsize=512)
def _compiled(source: str, rulebook: str) -> CodeType:
    """The generated source compiled once per text: a fleet worker builds one Prefilter per partition of each
    rulebook, and compiling was ~a quarter of loading an evaluator (constants live in each one's namespace)."""
    return compile(source, f"<prefilter {rulebook}>", "exec")


class Prefilter:
    """For one plan: `may_match(event)` is False only when no pattern of the event's kind can take its fact."""

    def __init__(self, plan: Plan, fields: FactFields):
        where = {key: (ENVELOPE, name) for key, name in fields.envelope}
        where.update({key: (LABELS, name) for key, name in fields.labels})
        where.update({key: (ATTRS, name) for key, name in fields.attrs})
        for text in plan.text_tests:  # computed by make_fact, not copied (FactFields lists them as attrs too)
            where.pop(text.key, None)
        by_kind: dict[str, list[tuple[Needed, ...]]] = {}
        unknown = False
        for pattern in plan.patterns:
            kind = _kind(pattern.test)
            if kind is None:
                unknown = True
                continue
            by_kind.setdefault(kind, []).append(tuple(_needed(pattern.test, where)))
        # A kind with a pattern that needs nothing checkable is always asserted: it is not in the table.
        self.patterns: Mapping[str, tuple[tuple[Needed, ...], ...]] = MappingProxyType(
            {} if unknown else {kind: tuple(found) for kind, found in by_kind.items() if all(found)})
        source, namespace = _source(self.patterns)
        exec(_compiled(source, plan.rulebook.name), namespace)  # noqa: S102  # our own source
        self._table: Mapping[str, Callable[[Event], bool]] = MappingProxyType(namespace["TABLE"])

    def may_match(self, event: Event) -> bool:
        check = self._table.get(event.kind)
        return True if check is None else check(event)

    def may_match_slowly(self, event: Event) -> bool:
        """The same answer, test by test through `fails` (what the generated source must agree with)."""
        patterns = self.patterns.get(event.kind)
        if patterns is None:
            return True
        return any(not any(fails(needed, _read(event, needed)) for needed in needs) for needs in patterns)


def _read(event: Event, needed: Needed) -> object:
    if needed.source == ENVELOPE:
        return getattr(event, needed.name)
    return (event.labels if needed.source == LABELS else event.attrs).get(needed.name)
