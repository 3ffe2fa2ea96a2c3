"""The condition operators, one table: each operator is defined once, with what it takes (the parser's type
check), its meaning on an observed value, how the evaluation plan tests it, how explanations show it, and its
line in docs/rulebooks.md (a docs test keeps the two equal). A new operator is one entry here."""

from __future__ import annotations

import operator as py
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from gpuslo.engine.rulebook import regex
from gpuslo.engine.rulebook.model import And, Compare, Expr, Not, Or

Takes = Literal["any", "number", "string", "list", "field"]
# How the evaluation plan (engine/plan.py) tests an operator on a fact: one of the comparisons every engine
# has (eq ne lt le gt ge: a fact key against a value), `in` (equal to any value of a list), `text` (the 0/1 key
# the runtime computes in Python: durable_rules' regex has no escapes, DESIGN.md) or `exists`.
PlanAs = Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "text", "exists"]


@dataclass(frozen=True)
class Operator:
    """One condition operator: `field <name> value` (`has field` for presence)."""

    name: str
    takes: Takes  # "any": a number or string field; "string": a string field and a quoted string; "list": `in`
    holds: Callable[[Any, Any], bool]  # on an observed value that is not None
    plan: PlanAs
    doc: str  # what it means, as docs/rulebooks.md's operator table says it
    example: str
    inverse: str | None = None  # what `not (a <name> b)` becomes; None: it stays a negated test
    symbol: str | None = None  # how explanations write it, when not its name
    refuse: Callable[[str], tuple[str, str | None] | None] | None = None  # (why, hint) a literal is refused

    @property
    def shown(self) -> str:
        return self.symbol or self.name


def _contains(observed: Any, expected: Any) -> bool:
    return str(expected) in str(observed)


def _matches(observed: Any, expected: Any) -> bool:
    return regex.search(str(expected), str(observed))


def _member(observed: Any, expected: Any) -> bool:
    return observed in expected


def _present(observed: Any, _expected: Any) -> bool:
    return observed is not None


_TABLE: tuple[Operator, ...] = (
    Operator("==", "any", py.eq, "eq", "equal to a number or string", "`api == 'cudaMalloc'`",
             inverse="!=", symbol="="),
    Operator("!=", "any", py.ne, "ne", "not equal (a missing field is neither equal nor unequal)",
             "`state != 'ok'`", inverse="==", symbol="≠"),
    Operator("<", "number", py.lt, "lt", "less than", "`free_bytes < 1GiB`", inverse=">="),
    Operator("<=", "number", py.le, "le", "at most", "`gap_ms <= 5`", inverse=">"),
    Operator(">", "number", py.gt, "gt", "greater than", "`fragmentation_ratio > 0.65`", inverse="<="),
    Operator(">=", "number", py.ge, "ge", "at least", "`tokens >= 100`", inverse="<"),
    Operator("in", "list", _member, "in", "one of a list (`[...]` or a list name); `not in`: none of them",
             "`xid in [48, 63]`, `state in broken_states`, `xid not in fatal_xids`"),
    Operator("contains", "string", _contains, "text", "the text holds the string", "`message contains 'NCCL'`"),
    Operator("matches", "string", _matches, "text", "an RE2 regex found anywhere in the text",
             "`error_name matches '^cuda(Error)?OutOf'`", refuse=regex.regex_problem),
    Operator("has", "field", _present, "exists", "the field is present (not null)", "`has gpu`"),
)
OPERATORS: Mapping[str, Operator] = MappingProxyType({op.name: op for op in _TABLE})
SYMBOLS: tuple[str, ...] = tuple(sorted((n for n in OPERATORS if not n.isidentifier()), key=len, reverse=True))
WORDS: frozenset[str] = frozenset(n for n in OPERATORS if n.isidentifier())


def holds(op: str, observed: Any, expected: Any) -> bool:
    """One comparison; a missing field never holds (as in the engine), nor do values of types that do not
    compare."""
    if observed is None:
        return False
    try:
        return OPERATORS[op].holds(observed, expected)
    except TypeError:
        return False


def negation_normal_form(expr: Expr, negate: bool = False) -> Expr:
    """Push `not` down to the leaves; a negated leaf stays a Not only for operators without an inverse."""
    if isinstance(expr, Not):
        return negation_normal_form(expr.item, not negate)
    if isinstance(expr, And | Or):
        items = tuple(negation_normal_form(item, negate) for item in expr.items)
        return (Or(items) if isinstance(expr, And) else And(items)) if negate else type(expr)(items)
    if negate and isinstance(expr, Compare) and OPERATORS[expr.op].inverse is not None:
        return Compare(OPERATORS[expr.op].inverse or expr.op, expr.left, expr.right)
    return Not(expr) if negate else expr
