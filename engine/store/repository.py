"""Reads and writes of events, violations (reads) and rulebook loads, as plain functions taking a Session first.

The engine's matches and clears are written by store.violations, the one write path of violations.

The caller owns the transaction (Database.session()); these functions never commit. Driver errors come out as
StoreError naming the function.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, bindparam, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpuslo.engine.errors import StoreError
from gpuslo.engine.events import Event, canonical_json, text_digest
from gpuslo.engine.ingest_types import ACCEPTED, CONFLICT, DUPLICATE
from gpuslo.engine.store.driver_sql import expanding_statement
from gpuslo.engine.store.event_insert import NewEvent, insert_events
from gpuslo.engine.store.event_read import ERROR_MAX, ReadEvent, read_event
from gpuslo.engine.store.models import (
    LOADED_WHERE,
    EventRow,
    EvidenceRow,
    HistoryRow,
    RulebookVersionRow,
    ViolationRow,
)
from gpuslo.engine.store.read_models import (
    EventFilter,
    Page,
    RulebookVersionView,
    StoredEvent,
    ViolationDetail,
    ViolationFilter,
    ViolationView,
)
from gpuslo.engine.store.rows import (
    chunks,
    history_entry,
    require_aware,
    store_operation,
    violation_fields,
    violation_view,
)
from gpuslo.engine.store.search import violation_conditions

# Rows per INSERT or IN (...) list: well under SQLite's and PostgreSQL's bound-parameter limits.
_CHUNK = 500
ACTIVE_STATUSES = ("open", "acknowledged")


def _insert(session: Session) -> Any:
    """The dialect's INSERT construct, which knows ON CONFLICT."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def _check_page(operation: str, page: int, page_size: int) -> None:
    if page < 1 or not 1 <= page_size <= 1000:
        raise StoreError(f"{operation}: page must be >= 1 and page_size within 1..1000, "
                         f"got page={page} page_size={page_size}")


# ---- events -------------------------------------------------------------------------------------------


def event_bodies(events: Sequence[Event]) -> list[str]:
    """Each event's canonical JSON text, the stored body its hash digests (`store_events(bodies=...)`): a writer
    builds them before it opens its transaction, so SQLite's one write lock is not held while they are built."""
    return [canonical_json(event.to_dict()) for event in events]


@store_operation
def store_events(session: Session, events: Sequence[Event], *, now: datetime | None = None,
                 bodies: Sequence[str] | None = None) -> list[str]:
    """Store new events; one status per event, in order: accepted, duplicate (same id and body), conflict.
    `bodies`: `event_bodies(events)`, when the caller built them already (outside the transaction)."""
    # The canonical text is both what the hash digests and the stored body: one serialization per event.
    if bodies is None:
        bodies = event_bodies(events)
    elif len(bodies) != len(events):
        raise StoreError(f"store_events: {len(bodies)} bodies for {len(events)} events")
    hashes = [text_digest(body) for body in bodies]
    first: dict[str, int] = {}
    for index, event in enumerate(events):
        first.setdefault(event.id, index)
    batch = [NewEvent(events[i], bodies[i], hashes[i]) for i in first.values()]
    inserted = insert_events(session, batch, now or datetime.now(UTC))
    known = {event_id: hashes[first[event_id]] for event_id in inserted}
    known.update(_stored_hashes(session, [event_id for event_id in first if event_id not in inserted]))
    statuses = []
    for index, event in enumerate(events):
        if event.id in inserted and first[event.id] == index:
            statuses.append(ACCEPTED)
        else:
            statuses.append(DUPLICATE if known.get(event.id) == hashes[index] else CONFLICT)
    return statuses


def _stored_hashes(session: Session, ids: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for chunk in chunks(ids, _CHUNK):
        query = select(EventRow.id, EventRow.body_hash).where(EventRow.id.in_(chunk))
        found.update(session.execute(query).tuples().all())
    return found


_READ_COLUMNS = (EventRow.body, EventRow.id, EventRow.kind, EventRow.time, EventRow.host)


def _read(row: Any) -> ReadEvent:
    body, event_id, kind, time, host = row
    return read_event(body, event_id=event_id, kind=kind, time=time, host=host)


@store_operation
def unprocessed_events(session: Session, limit: int) -> list[ReadEvent]:
    """Events the engine has not evaluated yet, oldest first; those whose body fails today's checks carry why."""
    rows = session.execute(
        select(*_READ_COLUMNS).where(EventRow.processed_at.is_(None)).order_by(EventRow.time, EventRow.id)
        .limit(limit)
    )
    return [_read(row) for row in rows]


_EVENTS = EventRow.__table__
_QUARANTINE = (update(_EVENTS).where(_EVENTS.c.id == bindparam("event_id"))
               .values(error=bindparam("error"), processed_at=bindparam("at")))


@store_operation
def quarantine_events(session: Session, errors: Sequence[tuple[str, str]], at: datetime) -> None:
    """Mark events the engine could not evaluate or store: their error is kept, and they count as processed."""
    require_aware(at, "quarantine_events")
    if errors:
        session.execute(_QUARANTINE, [{"event_id": event_id, "error": error[:ERROR_MAX], "at": at}
                                      for event_id, error in errors])


# Core, built once: the ORM's bulk UPDATE would also look for the events in the session to update them.
_MARK_PROCESSED = (update(_EVENTS).where(_EVENTS.c.id.in_(bindparam("ids", expanding=True)))
                   .values(processed_at=bindparam("at")))


@store_operation
def mark_processed(session: Session, ids: Sequence[str], at: datetime) -> None:
    """Record that the engine has evaluated these events."""
    require_aware(at, "mark_processed")
    if not ids:
        return
    session.flush()  # ORM changes the caller made first, as session.execute would autoflush them
    connection = session.connection()
    statement = expanding_statement(connection.dialect, _MARK_PROCESSED)
    for chunk in chunks(list(ids), _CHUNK):  # driver SQL: SQLAlchemy's postcompile step processed each id again
        statement.execute(connection, {"ids": chunk, "at": at})


@store_operation
def list_events(session: Session, filters: EventFilter, *, page: int = 1,
                page_size: int = 50) -> Page[StoredEvent]:
    """Events matching the filter, newest first."""
    _check_page("list_events", page, page_size)
    conditions: list[ColumnElement[bool]] = []
    for name in ("kind", "host", "gpu", "job"):
        value = getattr(filters, name)
        if value is not None:
            conditions.append(getattr(EventRow, name) == value)
    if filters.since is not None:
        conditions.append(EventRow.time >= filters.since)
    if filters.until is not None:
        conditions.append(EventRow.time <= filters.until)
    query = select(EventRow).where(*conditions).order_by(EventRow.time.desc(), EventRow.id.desc())
    rows, total = _paged(session, query, conditions, EventRow, page, page_size)
    items = tuple(_stored(r) for r in rows)
    return Page(items, page, page_size, total, page * page_size < total)


def _stored(row: EventRow) -> StoredEvent:
    read = read_event(row.body, event_id=row.id, kind=row.kind, time=row.time, host=row.host)
    return StoredEvent(read.event, row.received_at, row.processed_at, error=row.error or read.error,
                       time_sent=row.time_sent)


def _paged(session: Session, query: Select[Any], conditions: Sequence[ColumnElement[bool]], entity: Any,
           page: int, page_size: int) -> tuple[list[Any], int]:
    total = session.scalar(select(func.count()).select_from(entity).where(*conditions)) or 0
    rows = list(session.scalars(query.offset((page - 1) * page_size).limit(page_size)))
    return rows, total


# ---- violations ---------------------------------------------------------------------------------------


@store_operation
def list_violations(session: Session, filters: ViolationFilter, *, page: int = 1,
                    page_size: int = 50) -> Page[ViolationView]:
    """Violations matching the filter, most recently seen first."""
    _check_page("list_violations", page, page_size)
    conditions = violation_conditions(filters)
    newest_first = (ViolationRow.last_seen.desc(), ViolationRow.id.desc())
    query = select(ViolationRow).where(*conditions).order_by(*newest_first)
    rows, total = _paged(session, query, conditions, ViolationRow, page, page_size)
    return Page(tuple(violation_view(r) for r in rows), page, page_size, total, page * page_size < total)


@store_operation
def get_violation(session: Session, violation_id: int) -> ViolationDetail | None:
    """One violation with its evidence events (time order) and its history (oldest first)."""
    row = session.get(ViolationRow, violation_id)
    if row is None:
        return None
    rows = session.execute(
        select(*_READ_COLUMNS).join(EvidenceRow, EvidenceRow.event_id == EventRow.id)
        .where(EvidenceRow.violation_id == violation_id).order_by(EventRow.time, EventRow.id)
    )
    history = session.scalars(
        select(HistoryRow).where(HistoryRow.violation_id == violation_id)
        .order_by(HistoryRow.at, HistoryRow.id)
    )
    return ViolationDetail(**violation_fields(row), evidence=tuple(_read(row).event for row in rows),
                           history=tuple(history_entry(h) for h in history))


@store_operation
def count_violations_by_rule(session: Session) -> dict[str, int]:
    """Unresolved (open or acknowledged) violations per rule id."""
    rows = session.execute(
        select(ViolationRow.rule_id, func.count()).where(ViolationRow.status.in_(ACTIVE_STATUSES))
        .group_by(ViolationRow.rule_id)
    ).tuples().all()
    return dict(rows)


# ---- rulebooks ----------------------------------------------------------------------------------------


@store_operation
def record_rulebook_load(session: Session, *, name: str, version: str, content_hash: str, path: str,
                         source: str, error: str | None, now: datetime) -> None:
    """Record a load; a successful reload of identical content only moves loaded_at (and path, version)."""
    require_aware(now, "record_rulebook_load")
    table = RulebookVersionRow.__table__
    values = {"name": name, "version": version, "content_hash": content_hash, "path": path, "source": source,
              "loaded_at": now, "error": error}
    statement = _insert(session)(table).values(values)
    if error is None:
        statement = statement.on_conflict_do_update(
            index_elements=["name", "content_hash"], index_where=text(LOADED_WHERE),
            set_={"loaded_at": now, "path": path, "version": version},
        )
    session.execute(statement)


@store_operation
def list_rulebook_versions(session: Session, limit: int = 200) -> list[RulebookVersionView]:
    """Rulebook loads, newest first."""
    rows = session.scalars(
        select(RulebookVersionRow).order_by(RulebookVersionRow.loaded_at.desc(), RulebookVersionRow.id.desc())
        .limit(limit)
    )
    return [
        RulebookVersionView(r.id, r.name, r.version, r.content_hash, r.path, r.source, r.loaded_at, r.error)
        for r in rows
    ]

