"""A rulebook's evaluation plan, engine-neutral: for each event pattern of each rule, the test a fact must pass,
in a few primitives (a fact key compared with a value, all of, any of); the fact keys to copy, the text tests
the runtime computes, and the rule and pattern each action stands for. engine/matcher.py speaks it to
durable_rules; engine/facts.py turns events into the facts it tests.

Facts have flat keys: envelope fields and attrs by name, `labels.x` as `labels__x`, `ts` (event time, epoch
seconds). Text tests (`contains`, `matches`) become derived 0/1 keys (operators.py says which operators).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpuslo.engine.rulebook.model import (
    Absence,
    And,
    Compare,
    EventPattern,
    Exists,
    Expr,
    FieldRef,
    Literal,
    LiteralValue,
    Not,
    Or,
    Rule,
    Rulebook,
    SingleEvent,
    rule_patterns,
)
from gpuslo.engine.rulebook.operators import OPERATORS, negation_normal_form


@dataclass(frozen=True)
class KeyOf:
    """The value of fact key `key` of the earlier pattern `alias` (a correlation's `gpu == frag.gpu`)."""

    alias: str
    key: str


@dataclass(frozen=True)
class Test:
    """Fact key `key` compared with `value` (`cmp` one of eq ne lt le gt ge), or present / missing."""

    key: str
    cmp: str  # eq ne lt le gt ge (an operator's `plan`), or exists / missing, which take no value
    value: LiteralValue | KeyOf = None


@dataclass(frozen=True)
class AllOf:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Node, ...]


Node = Test | AllOf | AnyOf


@dataclass(frozen=True)
class TextTest:
    """A text test (`contains`, `matches`) the runtime evaluates into the 0/1 fact key `key`."""

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
class PatternPlan:
    """One engine rule: a rule's pattern `alias`, the test its facts must pass, and the action it runs."""

    name: str  # r_<rule id>__<alias>, unique in the ruleset
    alias: str
    test: Node
    action: str  # "<ruleset>|<rule id>|<alias>"


@dataclass(frozen=True)
class Plan:
    """A rulebook ready for an engine: its patterns' tests, and what the runtime must post and keep."""

    ruleset: str
    rulebook: Rulebook
    patterns: tuple[PatternPlan, ...]
    kinds: frozenset[str]
    keys: frozenset[str]
    text_tests: tuple[TextTest, ...]
    max_window_s: float
    actions: Mapping[str, RuleAction] = field(default_factory=lambda: MappingProxyType({}))


def fact_key(name: str) -> str:
    """The flat fact key of a rule-language field name."""
    return name.replace(".", "__")


class _Planner:
    def __init__(self, ruleset: str):
        self.ruleset = ruleset
        self.keys: set[str] = {"kind", "ts"}
        self.text_tests: dict[tuple[str, str, str], TextTest] = {}
        self.actions: dict[str, RuleAction] = {}

    def key(self, name: str) -> str:
        key = fact_key(name)
        self.keys.add(key)
        return key

    def text_key(self, compare: Compare) -> str:
        pattern = str(compare.right.value) if isinstance(compare.right, Literal) else ""
        ident = (compare.left.name, compare.op, pattern)
        if ident not in self.text_tests:
            key = f"t__{len(self.text_tests)}"
            self.text_tests[ident] = TextTest(key, compare.left.name, compare.op, pattern)
            self.keys.add(key)
        return self.text_tests[ident].key

    def leaf(self, expr: Expr, negated: bool) -> Node:
        if isinstance(expr, Exists):
            return Test(self.key(expr.field.name), "missing" if negated else "exists")
        assert isinstance(expr, Compare)
        how = OPERATORS[expr.op].plan
        if how == "text":
            return Test(self.text_key(expr), "eq", 0 if negated else 1)
        key = self.key(expr.left.name)
        if how == "in":
            assert isinstance(expr.right, Literal) and isinstance(expr.right.value, tuple)
            if negated:
                return AllOf(tuple(Test(key, "ne", v) for v in expr.right.value))
            return AnyOf(tuple(Test(key, "eq", v) for v in expr.right.value))
        if negated:  # negation_normal_form inverts every comparison that has an inverse
            raise ValueError(f"operator {expr.op!r} has no inverse, so it cannot be negated")
        right = expr.right
        if isinstance(right, FieldRef):
            return Test(key, how, KeyOf(right.alias or "", self.key(right.name)))
        assert not isinstance(right.value, tuple)  # only `in` takes a list
        return Test(key, how, right.value)

    def node(self, expr: Expr) -> Node:
        if isinstance(expr, And | Or):
            items = tuple(self.node(i) for i in expr.items)
            return AllOf(items) if isinstance(expr, And) else AnyOf(items)
        if isinstance(expr, Not):
            return self.leaf(expr.item, negated=True)
        return self.leaf(expr, negated=False)

    def pattern(self, pattern: EventPattern) -> Node:
        terms: list[Node] = [Test("kind", "eq", pattern.kind)]
        if pattern.condition is not None:
            terms.append(self.node(negation_normal_form(pattern.condition)))
        return AllOf(tuple(terms))

    def rule(self, rule: Rule) -> list[PatternPlan]:
        """One engine rule per event pattern; the runtime joins correlations and counts in time windows.

        durable_rules' own joins crashed its C core (SIGSEGV in reduceExpressionSequence when a join tested
        a field of an earlier pattern, tests/engine/test_durable_edges.py), so the engine only matches single
        facts here, which it does reliably, and the runtime keeps the windows, where they are also bounded.
        """
        for key in (*rule.group_by, *getattr(rule.when, "same", ())):
            self.key(key)
        out = []
        for pattern in rule_patterns(rule):
            action = f"{self.ruleset}|{rule.id}|{pattern.alias}"
            self.actions[action] = RuleAction(rule, pattern.alias)
            out.append(PatternPlan(f"r_{rule.id}__{pattern.alias}", pattern.alias, self.pattern(pattern), action))
        return out


def _window(rule: Rule) -> float:
    when = rule.when
    if isinstance(when, Absence):
        return when.for_s
    return 0.0 if isinstance(when, SingleEvent) else when.within_s


def plan_rulebook(rulebook: Rulebook, *, ruleset: str | None = None) -> Plan:
    """The evaluation plan of every rule of the rulebook, as one ruleset."""
    name = ruleset or f"{rulebook.name}@{rulebook.content_hash[:12]}"
    planner = _Planner(name)
    patterns = tuple(p for rule in rulebook.rules for p in planner.rule(rule))
    return Plan(
        ruleset=name,
        rulebook=rulebook,
        patterns=patterns,
        kinds=frozenset(p.kind for r in rulebook.rules for p in rule_patterns(r)),
        keys=frozenset(planner.keys),
        text_tests=tuple(planner.text_tests.values()),
        max_window_s=max((_window(r) for r in rulebook.rules), default=0.0),
        actions=MappingProxyType(planner.actions),
    )
