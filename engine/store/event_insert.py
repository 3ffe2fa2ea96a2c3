"""Writing a batch of ingested events: one prepared statement per batch, shaped for each dialect.

SQLAlchemy's multi-row INSERT cost more per row than the databases did: bind processing and parameter building in
Python, and on PostgreSQL psycopg parsed the 7,000-parameter statement again on every call (it caches short ones
only). So SQLite gets one executemany of a one-row INSERT with the values already in the form SQLite stores, and
PostgreSQL one INSERT ... SELECT FROM unnest(one array per column): 14 parameters, prepared once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import TextClause, bindparam, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from gpuslo.engine.events import Event
from gpuslo.engine.store.driver_sql import sqlite_time  # rows compare and read back like the ORM's
from gpuslo.engine.store.models import EventRow
from gpuslo.engine.store.rows import chunks, require_aware

# What ingest writes; processed_at stays NULL until the engine has evaluated the event.
EVENT_COLUMNS = ("id", "kind", "time", "host", "gpu", "gpu_uuid", "pid", "job", "rank", "source", "body",
                 "body_hash", "time_sent", "received_at")
_TABLE = EventRow.__tablename__
_IN_LIST = 500  # ids per IN (...): well under SQLite's bound-parameter limit


@dataclass(frozen=True)
class NewEvent:
    """An event with the canonical JSON text stored as its body and that text's hash."""

    event: Event
    body: str
    body_hash: str


def insert_events(session: Session, batch: Sequence[NewEvent], received_at: datetime) -> set[str]:
    """Insert the events whose id is not stored yet (ids unique within `batch`); returns the ids inserted."""
    require_aware(received_at, "store_events")
    for item in batch:
        require_aware(item.event.time, f"store_events: event {item.event.id!r}")
    if not batch:
        return set()
    if session.get_bind().dialect.name == "postgresql":
        return _insert_postgresql(session, batch, received_at)
    return _insert_sqlite(session, batch, received_at)


# ---- SQLite -------------------------------------------------------------------------------------------

_SQLITE_INSERT = (f"INSERT INTO {_TABLE} ({', '.join(EVENT_COLUMNS)}) "
                  f"VALUES ({', '.join('?' * len(EVENT_COLUMNS))}) ON CONFLICT (id) DO NOTHING")
_STORED_IDS = select(EventRow.__table__.c.id).where(EventRow.__table__.c.id.in_(bindparam("ids", expanding=True)))


def stored_ids(session: Session, ids: Sequence[str]) -> set[str]:
    """Which of `ids` are stored events."""
    connection = session.connection()
    return {event_id for chunk in chunks(ids, _IN_LIST) for event_id in connection.scalars(_STORED_IDS, {"ids": chunk})}


def _stored_ids_sqlite(session: Session, ids: Sequence[str]) -> set[str]:
    """`stored_ids` on SQLite as driver SQL, one `?` per id: ~25 us for a 10-event POST where the expanding
    IN of SQLAlchemy's statement cost ~75 us (its cache lookup and the expansion at every call)."""
    connection = session.connection()
    return {row[0] for chunk in chunks(ids, _IN_LIST)
            for row in connection.exec_driver_sql(_SQLITE_STORED_IDS.format(",".join("?" * len(chunk))), tuple(chunk))}


_SQLITE_STORED_IDS = f"SELECT id FROM {_TABLE} WHERE id IN ({{}})"


def _insert_sqlite(session: Session, batch: Sequence[NewEvent], received_at: datetime) -> set[str]:
    """A write transaction holds SQLite's lock from BEGIN IMMEDIATE on (store/db.py), so the ids not stored
    before the INSERT are exactly those it adds."""
    stored = _stored_ids_sqlite(session, [item.event.id for item in batch])
    received = sqlite_time(received_at)
    rows = [(e.id, e.kind, sqlite_time(e.time), e.host, e.gpu, e.gpu_uuid, e.pid, e.job, e.rank, e.source,
             item.body, item.body_hash, e.time_sent, received)
            for item in batch if (e := item.event).id not in stored]
    if rows:
        session.connection().exec_driver_sql(_SQLITE_INSERT, rows)
    return {row[0] for row in rows}


# ---- PostgreSQL ---------------------------------------------------------------------------------------


def _postgresql_insert() -> TextClause:
    """INSERT ... SELECT FROM unnest(one array per column) ON CONFLICT DO NOTHING RETURNING the ids added."""
    # SQLAlchemy leaves its dialects' constructors unannotated.
    table, dialect = EventRow.__table__, postgresql.dialect()  # type: ignore[no-untyped-call]
    arrays = [name for name in EVENT_COLUMNS if name != "received_at"]
    casts = ", ".join(f"CAST(:{name} AS {table.c[name].type.compile(dialect)}[])" for name in arrays)
    received = f"CAST(:received_at AS {table.c.received_at.type.compile(dialect)})"
    return text(f"INSERT INTO {_TABLE} ({', '.join(EVENT_COLUMNS)}) "
                f"SELECT {', '.join(arrays)}, {received} FROM unnest({casts}) AS batch({', '.join(arrays)}) "
                "ON CONFLICT (id) DO NOTHING RETURNING id")


_POSTGRESQL_INSERT = _postgresql_insert()


def _whole(value: float | None) -> float | None:
    """An integer column's value: psycopg dumps a list of one type only, and JSON Schema's `integer` takes 2.0."""
    return int(value) if type(value) is float and value.is_integer() else value


def _insert_postgresql(session: Session, batch: Sequence[NewEvent], received_at: datetime) -> set[str]:
    """Concurrent writers may insert the same id: ON CONFLICT and RETURNING settle which insert was this one.

    Rows go in id order: an insert that meets another writer's uncommitted row of the same id waits for that
    transaction, so two writers taking overlapping ids in different orders deadlock (fleet workers whose
    partitions share an event did, on the 16-core machine at 4 and 8 workers); in one order, one waits and none
    deadlocks (tests/engine/test_event_insert.py)."""
    batch = sorted(batch, key=lambda item: item.event.id)
    events = [item.event for item in batch]
    columns = {
        "id": [e.id for e in events], "kind": [e.kind for e in events], "time": [e.time for e in events],
        "host": [e.host for e in events], "gpu": [_whole(e.gpu) for e in events],
        "gpu_uuid": [e.gpu_uuid for e in events], "pid": [_whole(e.pid) for e in events],
        "job": [e.job for e in events], "rank": [_whole(e.rank) for e in events],
        "source": [e.source for e in events], "body": [item.body for item in batch],
        "body_hash": [item.body_hash for item in batch], "time_sent": [e.time_sent for e in events],
        "received_at": received_at,
    }
    return set(session.scalars(_POSTGRESQL_INSERT, columns))
