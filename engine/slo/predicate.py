"""Conditions of the rule language compiled once into Python predicates over one event (no durable_rules).

The semantics are the engine's and the explainer's (`explain.condition_holds`): a missing field never
satisfies a comparison, negated or not; `contains`/`matches` are the operator table's text tests. A property test
checks the two agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuslo.engine.events import ENVELOPE_FIELDS, Event
from gpuslo.engine.rulebook.model import And, Compare, Exists, Expr, Literal, Not, Or
from gpuslo.engine.rulebook.operators import holds as operator_holds
from gpuslo.engine.rulebook.operators import negation_normal_form

Predicate = Callable[[Event], bool]


def _always(_event: Event) -> bool:
    return True


def _getter(name: str) -> Callable[[Event], Any]:
    """Event.get(name) resolved once: most SLI fields are attributes, read straight from the mapping."""
    if name in ENVELOPE_FIELDS:
        return lambda event: getattr(event, name)
    if name.startswith("labels."):
        label = name[len("labels."):]
        return lambda event: event.labels.get(label)
    return lambda event: event.attrs.get(name)


def _compare(leaf: Compare, negated: bool) -> Predicate:
    get, op = _getter(leaf.left.name), leaf.op
    if not isinstance(leaf.right, Literal):  # an alias reference cannot occur in a single-event SLI condition
        raise ValueError(f"SLI conditions compare with constants, not {leaf.right}")
    expected = leaf.right.value

    def holds(event: Event) -> bool:
        observed = get(event)
        if observed is None:
            return False
        try:
            return operator_holds(op, observed, expected) != negated
        except TypeError:
            return False
    return holds


def _exists(leaf: Exists, negated: bool) -> Predicate:
    get = _getter(leaf.field.name)
    return lambda event: (get(event) is None) == negated


def _both(first: Predicate, second: Predicate) -> Predicate:
    return lambda event: first(event) and second(event)


def _either(first: Predicate, second: Predicate) -> Predicate:
    return lambda event: first(event) or second(event)


def _build(node: Expr) -> Predicate:
    if isinstance(node, And | Or):
        items = [_build(i) for i in node.items]
        combined = items.pop()
        while items:  # nested closures: no generator per call
            combined = _both(items.pop(), combined) if isinstance(node, And) else _either(items.pop(), combined)
        return combined
    negated = isinstance(node, Not)
    leaf = node.item if isinstance(node, Not) else node
    if isinstance(leaf, Exists):
        return _exists(leaf, negated)
    if isinstance(leaf, Compare):
        return _compare(leaf, negated)
    raise ValueError(f"not a leaf in negation normal form: {leaf}")


def predicate(expr: Expr | None) -> Predicate:
    """The condition as a function of one event; no condition holds for every event."""
    return _always if expr is None else _build(negation_normal_form(expr))
