"""SQL conditions of the violation filter: exact fields, prefix matches on host and rule, free text."""

from __future__ import annotations

from sqlalchemy import ColumnElement, or_

from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.store.views import ViolationFilter

_ESCAPE = "\\"


def like_literal(text: str) -> str:
    """`text` with LIKE's wildcards escaped, so a user's `%` or `_` matches itself."""
    return text.replace(_ESCAPE, _ESCAPE * 2).replace("%", _ESCAPE + "%").replace("_", _ESCAPE + "_")


def violation_conditions(filters: ViolationFilter) -> list[ColumnElement[bool]]:
    """`host` and `rule` match by prefix (`bulk` finds `bulk-07`), `q` by substring of host, rule, title or
    summary in any case; the others are exact."""
    conditions: list[ColumnElement[bool]] = []
    for name in ("status", "severity", "slo", "gpu"):
        value = getattr(filters, name)
        if value is not None:
            conditions.append(getattr(ViolationRow, name) == value)
    if filters.host is not None:
        conditions.append(ViolationRow.host.like(like_literal(filters.host) + "%", escape=_ESCAPE))
    if filters.rule_id is not None:
        conditions.append(ViolationRow.rule_id.like(like_literal(filters.rule_id) + "%", escape=_ESCAPE))
    if filters.text is not None:
        pattern = "%" + like_literal(filters.text.lower()) + "%"
        columns = (ViolationRow.host, ViolationRow.rule_id, ViolationRow.rule_title, ViolationRow.summary)
        conditions.append(or_(*(column.ilike(pattern, escape=_ESCAPE) for column in columns)))
    if filters.since is not None:
        conditions.append(ViolationRow.last_seen >= filters.since)
    if filters.until is not None:
        conditions.append(ViolationRow.last_seen <= filters.until)
    return conditions
