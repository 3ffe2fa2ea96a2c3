"""Reads behind the charts and the state metrics: event series, violation times, open-violation counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.store.models import EventRow, ViolationRow
from gpuslo.engine.store.read_models import ViolationFilter
from gpuslo.engine.store.rows import store_operation
from gpuslo.engine.store.search import violation_conditions

ACTIVE_STATUSES = ("open", "acknowledged")
SERIES_LIMIT = 20_000  # events one chart reads at most (the newest when more match)


@dataclass(frozen=True)
class ViolationMark:
    """When a violation opened, for timelines: id, severity, rule, host and GPU."""

    id: int
    first_seen: datetime
    last_seen: datetime
    severity: str
    rule_id: str
    host: str | None
    gpu: int | None


@dataclass(frozen=True)
class EventSeries:
    """Events of some kinds in time order; `truncated` when more matched than were read."""

    events: tuple[Event, ...]
    truncated: bool


@store_operation
def count_open_violations(session: Session) -> dict[tuple[str, str], int]:
    """Unresolved violations per (severity, status)."""
    rows = session.execute(
        select(ViolationRow.severity, ViolationRow.status, func.count())
        .where(ViolationRow.status.in_(ACTIVE_STATUSES)).group_by(ViolationRow.severity, ViolationRow.status)
    ).tuples().all()
    return {(severity, status): count for severity, status, count in rows}


@store_operation
def violation_marks(session: Session, filters: ViolationFilter, limit: int = SERIES_LIMIT) -> list[ViolationMark]:
    """The violations matching the list filter (the newest `limit`), oldest first."""
    rows = session.execute(
        select(ViolationRow.id, ViolationRow.first_seen, ViolationRow.last_seen, ViolationRow.severity,
               ViolationRow.rule_id, ViolationRow.host, ViolationRow.gpu)
        .where(*violation_conditions(filters)).order_by(ViolationRow.first_seen.desc()).limit(limit)
    ).tuples().all()
    return [ViolationMark(*row) for row in reversed(rows)]


@store_operation
def event_series(session: Session, kinds: Sequence[str], *, host: str | None = None, gpu: int | None = None,
                 since: datetime | None = None, until: datetime | None = None,
                 limit: int = SERIES_LIMIT) -> EventSeries:
    """Events of `kinds` on a host (and GPU), oldest first; the newest `limit` when more match."""
    conditions: list[ColumnElement[bool]] = [EventRow.kind.in_(list(kinds))]
    if host is not None:
        conditions.append(EventRow.host == host)
    if gpu is not None:
        conditions.append(EventRow.gpu == gpu)
    if since is not None:
        conditions.append(EventRow.time >= since)
    if until is not None:
        conditions.append(EventRow.time <= until)
    bodies = list(session.scalars(
        select(EventRow.body).where(*conditions).order_by(EventRow.time.desc(), EventRow.id.desc())
        .limit(limit + 1)))
    truncated = len(bodies) > limit
    return EventSeries(tuple(parse_event(body) for body in reversed(bodies[:limit])), truncated)


@store_operation
def event_places(session: Session, kinds: Sequence[str]) -> list[tuple[str, int | None]]:
    """Distinct (host, GPU) pairs that sent events of `kinds`, for the charts' pickers."""
    rows = session.execute(
        select(EventRow.host, EventRow.gpu).where(EventRow.kind.in_(list(kinds))).distinct()
        .order_by(EventRow.host, EventRow.gpu).limit(500)
    ).tuples().all()
    return list(rows)
