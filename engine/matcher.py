"""durable_rules, spoken here only: its JSON dialect (an evaluation plan as a ruleset definition) and its C
matcher, driven directly. The only module that imports durable_rules.

durable_rules' Python `Host` wraps each call in glue that costs more than the matching itself (research:
the C matcher is ~15 % of a matched post): two or three `json.dumps` per assert and retract, a state
document parsed and written back around every action, a `Closure` per action, and an exception that
serializes the fact again for every fact no rule takes. gpuslo's actions only note which rule fired and never
touch the state, so this module makes the same C calls in the same order (assert, start action, complete and
start the next, retract) without that glue, with one JSON text per fact used for both assert and retract.
bench/engine.py measures it against durable_rules' own Python API (part (a)) and against the bare C calls.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import durable_rules_engine as core
import orjson

from gpuslo.engine.errors import EngineError
from gpuslo.engine.plan import AllOf, AnyOf, KeyOf, Node, Plan

# Result codes of the C core's assert and retract calls (durable_rules' engine.py, `_handle_result`).
_NOT_HANDLED = 1  # no rule pattern takes the fact: the core keeps nothing of it
_OBSERVED = 2  # a pending fact has the same 32-bit id hash
_DEFERRED = 3  # queued without a state; durable's Host then drains state 0
# Ruleset names must be unique in the process: the C core crashed when two hosts registered the same name
# (seen in tests/engine/test_windows.py). Read-only use: it only hands out numbers.
_SERIAL = itertools.count()
# durable_rules' JSON reader refuses a number with an exponent but no fraction (`1e-7`, `1e16`: error 204, for a
# fact and for a ruleset alike), which is how orjson writes a float of one significant digit outside about
# [1e-5, 1e16). Such floats travel as `1.0e-7`: the same double, in a form the reader takes.
_PLAIN_FLOATS = (1e-4, 1e15)  # floats whose magnitude is in here never take an exponent
_BARE_EXPONENT = re.compile(r"^(-?\d+)([eE].*)$")
_MARK = f"gpuslo-float-{secrets.token_hex(8)}-"  # stands in for an odd float while the rest is encoded


class IdCollision(EngineError):
    """The core already holds a pending fact whose id hashes like this one's; re-key and assert again."""


# The plan's comparisons in durable_rules' dialect ("eq" is the bare `{key: value}`).
_DIALECT = {"ne": "$neq", "lt": "$lt", "le": "$lte", "gt": "$gt", "ge": "$gte", "exists": "$ex", "missing": "$nex"}


def _condition(node: Node) -> dict[str, Any]:
    if isinstance(node, AllOf | AnyOf):
        return {"$and" if isinstance(node, AllOf) else "$or": [_condition(item) for item in node.items]}
    if node.cmp in ("exists", "missing"):
        return {_DIALECT[node.cmp]: {node.key: 1}}
    value = {node.value.alias: node.value.key} if isinstance(node.value, KeyOf) else node.value
    return {node.key: value} if node.cmp == "eq" else {_DIALECT[node.cmp]: {node.key: value}}


def definition(plan: Plan) -> dict[str, Any]:
    """The durable_rules ruleset definition of a plan: one rule per pattern (`all` of one fact, `run` its
    action), keys sorted at every level, as durable_rules' Host receives it."""
    rules = {p.name: {"all": [{p.alias: _condition(p.test)}], "run": p.action} for p in plan.patterns}
    result: dict[str, Any] = json.loads(json.dumps(rules, sort_keys=True))
    return result


@dataclass(frozen=True)
class Ruleset:
    """A compiled ruleset registered in the C core: its handle and the action each engine rule runs."""

    name: str
    handle: int
    actions: Mapping[str, str]  # engine rule name → action name


def unique_name(prefix: str) -> str:
    """A ruleset name no other ruleset of this process has."""
    return f"{prefix}#{next(_SERIAL)}"


def register_plan(plan: Plan) -> Ruleset:
    """Create the plan's ruleset (named `plan.ruleset`) in the C core."""
    return register(plan.ruleset, definition(plan))


def register(name: str, rules: Mapping[str, Mapping[str, Any]]) -> Ruleset:
    """Create a ruleset in the C core; `rules` is durable_rules JSON whose rules name their action in `run`, as
    durable_rules' Host expects."""
    actions = {rule: str(body["run"]) for rule, body in rules.items()}
    stripped = {rule: {key: value for key, value in body.items() if key != "run"} for rule, body in rules.items()}
    try:
        handle = core.create_ruleset(name, dumps(stripped))
    except core.error as exc:
        raise EngineError(f"ruleset {name!r}: the engine refused the compiled ruleset: {exc}") from exc
    return Ruleset(name, handle, MappingProxyType(actions))


def _odd(value: object) -> bool:
    low, high = _PLAIN_FLOATS
    return type(value) is float and value != 0 and not low <= abs(value) < high


def number_text(value: float) -> str:
    """A float as the core reads it: orjson's shortest text, with `.0` before a bare exponent."""
    text = orjson.dumps(value).decode()
    bare = _BARE_EXPONENT.match(text)
    return f"{bare[1]}.0{bare[2]}" if bare else text


def _with_numbers(value: Any, marks: dict[str, str], prefix: str) -> Any:
    """`value` with each odd float replaced by a mark (its text kept in `marks`), lists and mappings walked."""
    if _odd(value):
        mark = f"{prefix}{len(marks)}"
        marks[f'"{mark}"'] = number_text(value)
        return mark
    if isinstance(value, Mapping):
        return {key: _with_numbers(item, marks, prefix) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_with_numbers(item, marks, prefix) for item in value]
    return value


def dumps(value: Any) -> str:
    """JSON text the core reads (a ruleset, a fact): orjson's, with every odd float written as number_text."""
    marks: dict[str, str] = {}
    prefix, plain = _MARK, orjson.dumps(value).decode()
    while prefix in plain:  # a text of the value holds the mark: take another, so no string is ever touched
        prefix = f"gpuslo-float-{secrets.token_hex(8)}-"
    text = orjson.dumps(_with_numbers(value, marks, prefix)).decode()
    for mark, number in marks.items():
        text = text.replace(mark, number, 1)
    return text


def encode(fact: Mapping[str, Any]) -> str:
    """The JSON text of a fact (flat: a key's value is never a list or mapping), as the C core reads it."""
    for value in fact.values():
        if _odd(value):
            return dumps(fact)
    return orjson.dumps(fact).decode()


def assert_fact(ruleset: Ruleset, fact: str) -> list[str] | None:
    """Assert a fact (JSON text); the actions it fired, in the core's order, or None when no rule took it.

    Raises IdCollision when the core holds a pending fact with a colliding id.
    """
    try:
        code, state = core.assert_fact(ruleset.handle, fact)
    except core.error as exc:
        raise EngineError(f"ruleset {ruleset.name!r}: the engine could not assert a fact: {exc}") from exc
    if code == _NOT_HANDLED:
        return None
    if code == _OBSERVED:
        raise IdCollision(f"ruleset {ruleset.name!r}: a pending fact has the same id hash")
    return _run_actions(ruleset, 0 if code == _DEFERRED else state)


def retract_fact(ruleset: Ruleset, fact: str) -> list[str]:
    """Retract a fact asserted before (the same JSON text); the actions that fired, if any."""
    try:
        code, state = core.retract_fact(ruleset.handle, fact)
    except core.error as exc:
        raise EngineError(f"ruleset {ruleset.name!r}: the engine could not retract a fact: {exc}") from exc
    if code in (_NOT_HANDLED, _OBSERVED):
        return []
    return _run_actions(ruleset, 0 if code == _DEFERRED else state)


def _run_actions(ruleset: Ruleset, state: int) -> list[str]:
    """Take every action the core queued for the state, in order, completing each before the next."""
    fired: list[str] = []
    try:
        started = core.start_action_for_state(ruleset.handle, state)
        message = started[1] if started else None
        while message is not None:
            try:
                fired.append(_action_of(ruleset, message))
            except EngineError:
                core.abandon_action(ruleset.handle, state)  # as durable's Host does when an action fails
                raise
            message = core.complete_and_start_action(ruleset.handle, state)
    except core.error as exc:
        raise EngineError(f"ruleset {ruleset.name!r}: the engine failed while running actions: {exc}") from exc
    return fired


def _action_of(ruleset: Ruleset, message: str) -> str:
    """The action of a queued message `{"<engine rule>": {...}}`; rule names are ours and need no escapes."""
    end = message.find('"', 2)
    action = ruleset.actions.get(message[2:end]) if message.startswith('{"') and end > 2 else None
    if action is None:  # not the shape above: read it the slow way before giving up
        parsed = orjson.loads(message)
        rule = next(iter(parsed), None) if isinstance(parsed, dict) else None
        action = ruleset.actions.get(rule) if isinstance(rule, str) else None
        if action is None:
            raise EngineError(f"ruleset {ruleset.name!r}: the engine ran an unknown rule: {message[:200]}")
    return action
