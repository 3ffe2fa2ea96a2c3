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
class RuleAction:
    """What an engine action stands for: a rule, and which of its patterns matched (CLEAR_ALIAS: its
    `resolve: {event, if}` clearing pattern)."""

    rule: Rule
    alias: str


@dataclass(frozen=True)
class CompiledRulebook:
    """A rulebook ready for the engine: the ruleset definition and what the runtime must post."""

    ruleset: str
    definition: str  # JSON text of {rule_name: {...}}; action names are "<ruleset>|<rule id>|<pattern alias>"
    rulebook: Rulebook
    kinds: frozenset[str]
    keys: frozenset[str]
    text_tests: tuple[TextTest, ...]
    max_window_s: float
    actions: Mapping[str, RuleAction] = field(default_factory=lambda: MappingProxyType({}))

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
        self.actions: dict[str, RuleAction] = {}

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

    def rule(self, rule: Rule) -> dict[str, dict[str, Any]]:
        """One engine rule per event pattern; the runtime joins correlations and counts in time windows.

        durable_rules' own joins crashed its C core (SIGSEGV in reduceExpressionSequence when a join tested
        a field of an earlier pattern, tests/engine/test_durable_edges.py), so the engine only matches single
        facts here, which it does reliably, and the runtime keeps the windows, where they are also bounded.
        """
        for key in (*rule.group_by, *getattr(rule.when, "same", ())):
            self.keys.add(fact_key(key))
        out = {}
        for pattern in rule_patterns(rule):
            action = f"{self.name}|{rule.id}|{pattern.alias}"
            self.actions[action] = RuleAction(rule, pattern.alias)
            out[f"r_{rule.id}__{pattern.alias}"] = {"all": [self.pattern(pattern, [])], "run": action}
        return out


def rule_patterns(rule: Rule) -> tuple[EventPattern, ...]:
    """Every event pattern of a rule, each an engine rule of its own: the trigger's patterns, an absence's
    arming pattern (ARM_ALIAS) and the clearing pattern (CLEAR_ALIAS), which the runtime turns into a Clear."""
    when = rule.when
    patterns = when.patterns if isinstance(when, Correlation) else (when.pattern,)
    if isinstance(when, Absence) and when.after is not None:
        patterns = (*patterns, when.after)
    if rule.lifecycle.resolve_when is not None:
        patterns = (*patterns, rule.lifecycle.resolve_when)
    return patterns


def _kinds(rule: Rule) -> set[str]:
    return {pattern.kind for pattern in rule_patterns(rule)}


def _window(rule: Rule) -> float:
    when = rule.when
    if isinstance(when, Absence):
        return when.for_s
    return 0.0 if isinstance(when, SingleEvent) else when.within_s


def compile_rulebook(rulebook: Rulebook, *, ruleset: str | None = None) -> CompiledRulebook:
    """Compile every rule of the rulebook into one durable_rules ruleset definition."""
    name = ruleset or f"{rulebook.name}@{rulebook.content_hash[:12]}"
    compiler = _Compiler(name)
    definition = {name: body for rule in rulebook.rules for name, body in compiler.rule(rule).items()}
    return CompiledRulebook(
        ruleset=name,
        definition=json.dumps(definition, sort_keys=True, indent=1),
        rulebook=rulebook,
        kinds=frozenset().union(*(_kinds(r) for r in rulebook.rules)) if rulebook.rules else frozenset(),
        keys=frozenset(compiler.keys),
        text_tests=tuple(compiler.text_tests.values()),
        max_window_s=max((_window(r) for r in rulebook.rules), default=0.0),
        actions=MappingProxyType(compiler.actions),
    )
