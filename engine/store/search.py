"""SQL conditions of the violation filter: exact fields, `*`-suffixed prefixes on host and rule, free text."""

from __future__ import annotations

from sqlalchemy import ColumnElement, or_
from sqlalchemy.orm import QueryableAttribute

from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.store.read_models import ViolationFilter

_ESCAPE = "\\"


def like_literal(text: str) -> str:
    """`text` with LIKE's wildcards escaped, so a user's `%` or `_` matches itself."""
    return text.replace(_ESCAPE, _ESCAPE * 2).replace("%", _ESCAPE + "%").replace("_", _ESCAPE + "_")


def exact_or_prefix(column: QueryableAttribute[str | None], value: str) -> ColumnElement[bool]:
    """`value` exactly, or every value starting with it when it ends in `*` (`bulk*` finds `bulk-07`)."""
    if value.endswith("*"):
        return column.like(like_literal(value[:-1]) + "%", escape=_ESCAPE)
    return column == value


def violation_conditions(filters: ViolationFilter) -> list[ColumnElement[bool]]:
    """`host` and `rule_id` are exact or, ending in `*`, prefixes; `text` is a substring of host, rule, title or
    summary in any case; the others are exact."""
    conditions: list[ColumnElement[bool]] = []
    for name in ("status", "severity", "slo", "gpu"):
        value = getattr(filters, name)
        if value is not None:
            conditions.append(getattr(ViolationRow, name) == value)
    if filters.host is not None:
        conditions.append(exact_or_prefix(ViolationRow.host, filters.host))
    if filters.rule_id is not None:
        conditions.append(exact_or_prefix(ViolationRow.rule_id, filters.rule_id))
    if filters.text is not None:
        pattern = "%" + like_literal(filters.text.lower()) + "%"
        columns = (ViolationRow.host, ViolationRow.rule_id, ViolationRow.rule_title, ViolationRow.summary)
        conditions.append(or_(*(column.ilike(pattern, escape=_ESCAPE) for column in columns)))
    if filters.since is not None:
        conditions.append(ViolationRow.last_seen >= filters.since)
    if filters.until is not None:
        conditions.append(ViolationRow.last_seen <= filters.until)
    return conditions
