"""Compile a frozen Rulebook to a durable_rules JSON ruleset (plain data; only the runtime talks to the engine).

Events reach the engine as facts with flat keys: envelope fields and attrs by name, `labels.x` as `labels__x`,
`ts` (event time, epoch seconds). Text tests (`contains`, `matches`) are evaluated by the runtime into derived
0/1 keys, because durable_rules' own regex has no escapes and cannot be negated (measured, see DESIGN.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpuslo.engine.rulebook.model import (
    And,
    Compare,
    Correlation,
    Count,
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

_INVERSE = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}
_OPERATORS = {"!=": "$neq", "<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte"}
TEXT_OPS = ("contains", "matches")


@dataclass(frozen=True)
class TextTest:
    """A `contains`/`matches` test the runtime evaluates into the 0/1 fact key `key`."""

    key: str
    field: str
    op: str
    pattern: str


@dataclass(frozen=True)
class CompiledRulebook:
    """A rulebook ready for the engine: the ruleset definition and what the runtime must post."""

    ruleset: str
    definition: str  # JSON text of {rule_name: {...}}; action names are "<ruleset>|<rule id>"
    rulebook: Rulebook
    kinds: frozenset[str]
    keys: frozenset[str]
    text_tests: tuple[TextTest, ...]
    max_window_s: float
    rules: Mapping[str, Rule] = field(default_factory=lambda: MappingProxyType({}))

    def definition_dict(self) -> dict[str, Any]:
        """A fresh copy of the definition (durable_rules mutates what it is given)."""
        result: dict[str, Any] = json.loads(self.definition)
        return result


def fact_key(name: str) -> str:
    """The flat fact key of a rule-language field name."""
    return name.replace(".", "__")


def negation_normal_form(expr: Expr, negate: bool = False) -> Expr:
    """Push `not` down to the leaves; a negated leaf stays a Not only for `in`, text tests and `has`."""
    if isinstance(expr, Not):
        return negation_normal_form(expr.item, not negate)
    if isinstance(expr, And | Or):
        items = tuple(negation_normal_form(item, negate) for item in expr.items)
        flip = negate
        return (Or(items) if isinstance(expr, And) else And(items)) if flip else type(expr)(items)
    if negate and isinstance(expr, Compare) and expr.op in _INVERSE:
        return Compare(_INVERSE[expr.op], expr.left, expr.right)
    return Not(expr) if negate else expr


class _Compiler:
    def __init__(self, name: str):
        self.name = name
        self.keys: set[str] = {"kind", "ts"}
        self.text_tests: dict[tuple[str, str, str], TextTest] = {}

    def text_key(self, compare: Compare) -> str:
        pattern = str(compare.right.value) if isinstance(compare.right, Literal) else ""
        ident = (compare.left.name, compare.op, pattern)
        if ident not in self.text_tests:
            key = f"t__{len(self.text_tests)}"
            self.text_tests[ident] = TextTest(key, compare.left.name, compare.op, pattern)
            self.keys.add(key)
        return self.text_tests[ident].key

    def operand(self, right: Literal | FieldRef) -> Any:
        if isinstance(right, FieldRef):
            self.keys.add(fact_key(right.name))
            return {right.alias: fact_key(right.name)}
        return right.value

    def leaf(self, expr: Expr, negated: bool) -> dict[str, Any]:
        if isinstance(expr, Exists):
            key = fact_key(expr.field.name)
            self.keys.add(key)
            return {"$nex" if negated else "$ex": {key: 1}}
        assert isinstance(expr, Compare)
        if expr.op in TEXT_OPS:
            return {self.text_key(expr): 0 if negated else 1}
        key = fact_key(expr.left.name)
        self.keys.add(key)
        if expr.op == "in":
            assert isinstance(expr.right, Literal) and isinstance(expr.right.value, tuple)
            values = expr.right.value
            if negated:
                return {"$and": [{"$neq": {key: v}} for v in values]}
            return {"$or": [{key: v} for v in values]}
        value = self.operand(expr.right)
        if expr.op == "==":
            return {key: value}
        return {_OPERATORS[expr.op]: {key: value}}

    def expression(self, expr: Expr) -> dict[str, Any]:
        if isinstance(expr, And | Or):
            return {"$and" if isinstance(expr, And) else "$or": [self.expression(i) for i in expr.items]}
        if isinstance(expr, Not):
            return self.leaf(expr.item, negated=True)
        return self.leaf(expr, negated=False)

    def pattern(self, pattern: EventPattern, extra: list[dict[str, Any]]) -> dict[str, Any]:
        terms: list[dict[str, Any]] = [{"kind": pattern.kind}]
        if pattern.condition is not None:
            terms.append(self.expression(negation_normal_form(pattern.condition)))
        return {pattern.alias: {"$and": terms + extra}}

    def correlation(self, when: Correlation) -> list[dict[str, Any]]:
        first = when.patterns[0].alias
        for key in when.same:
            self.keys.add(fact_key(key))
        out = [self.pattern(when.patterns[0], [])]
        previous = first
        for pattern in when.patterns[1:]:
            joins: list[dict[str, Any]] = [{fact_key(k): {first: fact_key(k)}} for k in when.same]
            joins.append({"$lte": {"ts": {"$add": {"$l": {first: "ts"}, "$r": when.within_s}}}})
            joins.append({"$gte": {"ts": {"$sub": {"$l": {first: "ts"}, "$r": when.within_s}}}})
            if when.ordered:
                joins.append({"$gte": {"ts": {previous: "ts"}}})
            out.append(self.pattern(pattern, joins))
            previous = pattern.alias
        return out

    def rule(self, rule: Rule) -> dict[str, Any]:
        action = f"{self.name}|{rule.id}"
        when = rule.when
        for key in rule.group_by:
            self.keys.add(fact_key(key))
        if isinstance(when, SingleEvent):
            return {"all": [self.pattern(when.pattern, [])], "run": action}
        if isinstance(when, Correlation):
            return {"all": self.correlation(when), "run": action}
        assert isinstance(when, Count)
        for key in when.same:
            self.keys.add(fact_key(key))
        return {"all": [self.pattern(when.pattern, [])], "run": action}


def _kinds(rule: Rule) -> set[str]:
    when = rule.when
    if isinstance(when, Correlation):
        return {p.kind for p in when.patterns}
    return {when.pattern.kind}


def _window(rule: Rule) -> float:
    return 0.0 if isinstance(rule.when, SingleEvent) else rule.when.within_s


def compile_rulebook(rulebook: Rulebook, *, ruleset: str | None = None) -> CompiledRulebook:
    """Compile every rule of the rulebook into one durable_rules ruleset definition."""
    name = ruleset or f"{rulebook.name}@{rulebook.content_hash[:12]}"
    compiler = _Compiler(name)
    definition = {f"r_{rule.id}": compiler.rule(rule) for rule in rulebook.rules}
    return CompiledRulebook(
        ruleset=name,
        definition=json.dumps(definition, sort_keys=True, indent=1),
        rulebook=rulebook,
        kinds=frozenset().union(*(_kinds(r) for r in rulebook.rules)) if rulebook.rules else frozenset(),
        keys=frozenset(compiler.keys),
        text_tests=tuple(compiler.text_tests.values()),
        max_window_s=max((_window(r) for r in rulebook.rules), default=0.0),
        rules=MappingProxyType({f"{name}|{rule.id}": rule for rule in rulebook.rules}),
    )
