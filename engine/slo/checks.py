"""Check the `indicator:` of every SLO: kind, conditions, target, window, group_by and the burn-rate policy.

Problems carry the location of the offending value, as the rule checks' do.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from gpuslo.engine.errors import RulebookProblem
from gpuslo.engine.events import ENVELOPE_FIELDS, KINDS, Event
from gpuslo.engine.rulebook.checks import (
    CheckContext,
    duration_problem,
    expression_location,
    field_problems,
    kind_problem,
)
from gpuslo.engine.rulebook.marked_yaml import Path_
from gpuslo.engine.rulebook.model import And, Compare, Exists, Expr, Literal, Not, Or
from gpuslo.engine.slo.model import MIN_WINDOW_S
from gpuslo.engine.units import parse_duration

_SEARCH_LIMIT = 4096  # assignments tried when looking for a request the good condition calls bad


def indicator_problems(ctx: CheckContext, slo_id: str, slo: dict[str, Any]) -> Iterator[RulebookProblem]:
    """Every problem of one SLO's indicator (none when it has no indicator)."""
    indicator = slo.get("indicator")
    if not isinstance(indicator, dict):
        return
    doc, path = ctx.doc, ("slos", slo_id, "indicator")
    where = f"SLO '{slo_id}'"
    window = slo.get("window")
    if isinstance(window, str) and _seconds(window) is not None and _seconds(window) < MIN_WINDOW_S:  # type: ignore[operator]
        yield RulebookProblem(doc.at(("slos", slo_id, "window")),
                              f"{where}: a measured SLO's window must be at least 1h, got {window}")
    target = indicator.get("target")
    if isinstance(target, int | float) and not isinstance(target, bool) and not 0 < target < 1:
        yield RulebookProblem(doc.at((*path, "target")), f"{where}: target must be a ratio in (0, 1), got {target}",
                              hint="e.g. 0.99 for 99 %")
    requests = indicator.get("requests")
    kind = requests.get("event") if isinstance(requests, dict) else None
    yield from kind_problem(doc, (*path, "requests", "event"), kind, None)
    if not isinstance(kind, str) or kind not in KINDS:
        return
    yield from ctx.condition((*path, "requests", "if"), requests.get("if"), kind, {}, None)  # type: ignore[union-attr]
    yield from ctx.condition((*path, "good"), indicator.get("good"), kind, {}, None)
    yield from field_problems(doc, (*path, "group_by"), indicator.get("group_by"), [kind], None)
    yield from _policy_problems(ctx, path, indicator.get("burn_alerts"), target)
    yield from _good_can_be_false(ctx, path, kind, requests.get("if"), indicator.get("good"))  # type: ignore[union-attr]


def _seconds(text: str) -> float | None:
    try:
        return parse_duration(text)
    except ValueError:
        return None


def _policy_problems(ctx: CheckContext, path: Path_, alerts: object, target: object) -> Iterator[RulebookProblem]:
    if not isinstance(alerts, list):
        return
    names: set[str] = set()
    for i, alert in enumerate(alerts):
        if not isinstance(alert, dict):
            continue
        at = (*path, "burn_alerts", i)
        for field in ("long", "short"):
            yield from duration_problem(ctx.doc, (*at, field), alert.get(field), None)
        long_s, short_s = (_seconds(alert[f]) if isinstance(alert.get(f), str) else None for f in ("long", "short"))
        if long_s is not None and short_s is not None and short_s >= long_s:
            yield RulebookProblem(ctx.doc.at((*at, "short")),
                                  f"burn alert {i}: the short window must be shorter than the long one")
        burn = alert.get("burn")
        if isinstance(burn, int | float) and burn <= 0:
            yield RulebookProblem(ctx.doc.at((*at, "burn")), f"burn alert {i}: burn must be above 0, got {burn}")
        elif isinstance(burn, int | float) and isinstance(target, int | float) and 0 < target < 1 \
                and burn > 1 / (1 - target):
            yield RulebookProblem(ctx.doc.at((*at, "burn")),
                                  f"burn alert {i}: a burn rate of {burn} can never be reached with target "
                                  f"{target} (at most {1 / (1 - target):.4g} when every request is bad)")
        name = alert.get("name")
        if isinstance(name, str) and name in names and alert.get("severity") is not None:
            yield RulebookProblem(ctx.doc.at((*at, "severity")),
                                  f"burn alert '{name}': give the severity on its first pair only")
        if isinstance(name, str):
            names.add(name)


def _good_can_be_false(ctx: CheckContext, path: Path_, kind: str, requests: object,
                       good: object) -> Iterator[RulebookProblem]:
    """A request the good condition calls bad must exist, else the SLO can never burn."""
    from gpuslo.engine.slo.predicate import predicate  # here: see build.compile_sli

    good_expr, request_expr = ctx.conditions.get((*path, "good")), ctx.conditions.get((*path, "requests", "if"))
    if good_expr is None or (isinstance(requests, str) and request_expr is None):
        return  # no good condition, or one that did not parse (the condition checks report it)
    is_good, is_request = predicate(good_expr), predicate(request_expr)
    exprs = [e for e in (good_expr, request_expr) if e is not None]
    candidates = _candidates(exprs)
    names = sorted(candidates)
    for values in itertools.islice(itertools.product(*(candidates[n] for n in names)), _SEARCH_LIMIT):
        event = _synthetic(kind, dict(zip(names, values, strict=True)))
        if is_request(event) and not is_good(event):
            return
    yield RulebookProblem(expression_location(ctx.doc, (*path, "good"))[0],
                          "the good condition holds for every request, so the SLO can never burn",
                          hint="a good condition names a field a request can fail on, e.g. itl_max_ms < 200ms")


def _leaves(expr: Expr) -> Iterator[Compare | Exists]:
    if isinstance(expr, And | Or):
        for item in expr.items:
            yield from _leaves(item)
    elif isinstance(expr, Not):
        yield from _leaves(expr.item)
    else:
        yield expr


def _candidates(exprs: list[Expr]) -> dict[str, list[Any]]:
    """Per field: missing, each literal it is compared with, and values just around numeric ones."""
    found: dict[str, list[Any]] = {}
    for expr in exprs:
        for leaf in _leaves(expr):
            name = leaf.field.name if isinstance(leaf, Exists) else leaf.left.name
            values = found.setdefault(name, [None])
            literal = leaf.right.value if isinstance(leaf, Compare) and isinstance(leaf.right, Literal) else None
            for value in literal if isinstance(literal, tuple) else (literal,):
                if isinstance(value, int | float) and not isinstance(value, bool):
                    values += [value - 1, value, value + 1]
                elif isinstance(value, str):
                    values += [value, value + "~", ""]
                elif value is not None:
                    values.append(value)
    return {name: list(dict.fromkeys(values)) for name, values in found.items()}


def _synthetic(kind: str, fields: dict[str, Any]) -> Event:
    envelope = set(ENVELOPE_FIELDS) - {"id", "kind"}
    attrs = {k: v for k, v in fields.items() if k not in envelope and not k.startswith("labels.") and v is not None}
    labels = {k[len("labels."):]: v for k, v in fields.items() if k.startswith("labels.") and v is not None}
    given = {k: v for k, v in fields.items() if k in envelope}
    host = given.pop("host", None)
    return Event(id="probe", kind=kind, time=datetime(2000, 1, 1, tzinfo=UTC), host=host if host is not None else "h",
                 labels=labels, attrs=attrs, **given)
