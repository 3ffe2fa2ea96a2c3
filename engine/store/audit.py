"""The append-only audit log: record an action in the caller's transaction, list it with filters, export it.

Rows are inserted and never updated or deleted (retention keeps them). `before` and `after` are small JSON
snapshots of the target around the change (gpuslo.engine.store.snapshots builds them).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from gpuslo.engine.events import format_time
from gpuslo.engine.store import snapshots
from gpuslo.engine.store.access_models import AuditRow
from gpuslo.engine.store.read_models import Page
from gpuslo.engine.store.rows import require_aware, store_operation

MAX_DETAIL = 2000
EXPORT_CHUNK = 500
T = TypeVar("T")
COLUMNS = ("id", "at", "actor", "action", "target_type", "target_id", "before", "after", "source_ip", "detail")


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str
    action: str
    target_type: str | None
    target_id: str | None
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    source_ip: str | None
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": format_time(self.at), "actor": self.actor, "action": self.action,
                "target_type": self.target_type, "target_id": self.target_id,
                "before": dict(self.before) if self.before is not None else None,
                "after": dict(self.after) if self.after is not None else None,
                "source_ip": self.source_ip, "detail": self.detail}


@dataclass(frozen=True)
class AuditFilter:
    """Every field optional; `target` is `type` or `type:id`; since/until bound `at` (inclusive)."""

    actor: str | None = None
    action: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _jsonable(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    plain: dict[str, Any] = json.loads(json.dumps(dict(value), default=lambda v: format_time(v)
                                                  if isinstance(v, datetime) else str(v)))
    return plain


@store_operation
def record(session: Session, *, at: datetime, actor: str, action: str, target_type: str | None = None,
           target_id: object = None, before: Mapping[str, Any] | None = None,
           after: Mapping[str, Any] | None = None, source_ip: str | None = None,
           detail: str | None = None) -> None:
    """Append one audit row in the caller's transaction: it commits or rolls back with the action. The row is
    written at the session's next flush (its next query, its savepoint's end, at the latest its commit), so the
    resolves of an engine batch go in one INSERT."""
    require_aware(at, "audit.record")
    session.add(AuditRow(at=at, actor=(actor or "anonymous")[:200], action=action[:64], target_type=target_type,
                         target_id=None if target_id is None else str(target_id)[:200],
                         before=_jsonable(before), after=_jsonable(after), source_ip=(source_ip or None),
                         detail=detail[:MAX_DETAIL] if detail else None))


def _entry(row: AuditRow) -> AuditEntry:
    return AuditEntry(row.id, row.at, row.actor, row.action, row.target_type, row.target_id, row.before,
                      row.after, row.source_ip, row.detail)


def _query(filters: AuditFilter) -> Select[tuple[AuditRow]]:
    query = select(AuditRow)
    if filters.actor:
        query = query.where(AuditRow.actor == filters.actor)
    if filters.action:
        query = query.where(AuditRow.action == filters.action)
    if filters.target:
        kind, _, target_id = filters.target.partition(":")
        query = query.where(AuditRow.target_type == kind)
        if target_id:
            query = query.where(AuditRow.target_id == target_id)
    if filters.since:
        query = query.where(AuditRow.at >= filters.since)
    if filters.until:
        query = query.where(AuditRow.at <= filters.until)
    return query


@store_operation
def list_audit(session: Session, filters: AuditFilter, *, page: int = 1, page_size: int = 50) -> Page[AuditEntry]:
    """Newest first."""
    if page < 1 or not 1 <= page_size <= 1000:
        raise ValueError("page must be >= 1 and page_size within 1..1000")
    query = _query(filters)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(AuditRow.at.desc(), AuditRow.id.desc())
                           .offset((page - 1) * page_size).limit(page_size))
    items = tuple(_entry(r) for r in rows)
    return Page(items, page, page_size, total, page * page_size < total)


def iter_audit(session: Session, filters: AuditFilter) -> Iterator[AuditEntry]:
    """Every matching row, oldest first, read in keyset chunks so an export never holds the table in memory."""
    last_id = 0
    while True:
        rows = list(session.scalars(_query(filters).where(AuditRow.id > last_id)
                                    .order_by(AuditRow.id).limit(EXPORT_CHUNK)))
        yield from (_entry(r) for r in rows)
        if len(rows) < EXPORT_CHUNK:
            return
        last_id = rows[-1].id


def export_json(entries: Iterator[AuditEntry]) -> Iterator[str]:
    """A JSON array, streamed one entry at a time."""
    yield "["
    for index, entry in enumerate(entries):
        yield ("," if index else "") + "\n" + json.dumps(entry.to_dict(), sort_keys=False)
    yield "\n]\n"


def _csv_cell(value: Any) -> str:
    """Text of a cell; a leading = + - @ is quoted with ' so a spreadsheet never runs it as a formula."""
    text = "" if value is None else json.dumps(value) if isinstance(value, dict) else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def export_csv(entries: Iterator[AuditEntry]) -> Iterator[str]:
    """CSV with a header line, streamed one row at a time; before/after are JSON text."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(COLUMNS)
    for entry in entries:
        data = entry.to_dict()
        writer.writerow([_csv_cell(data[c]) for c in COLUMNS])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


@dataclass(frozen=True)
class AuditNote:
    """Who asked for an action and from where; the core records it in the action's own transaction."""

    action: str
    target_type: str
    target_id: object
    actor: str
    source: str | None = None
    detail: str | None = None


def audited(session: Session, note: AuditNote, change: Callable[[Session], T], now: datetime) -> T:
    """Run `change` and append its audit row (before/after snapshots of the target) in the same transaction."""
    before = snapshots.of(session, note.target_type, note.target_id)
    result = change(session)
    target_id = note.target_id if note.target_id is not None else getattr(result, "id", None)
    after = snapshots.of(session, note.target_type, target_id)
    record(session, at=now, actor=note.actor, action=note.action, target_type=note.target_type,
           target_id=target_id, before=before, after=after, source_ip=note.source, detail=note.detail)
    return result
