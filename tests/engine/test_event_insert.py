"""Ingest's own INSERT per dialect writes rows the ORM would have written, and earlier rows still compare."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from threading import Barrier
from typing import Any

import pytest
from postgres_support import scratch_database
from sqlalchemy import text
from sqlalchemy.dialects import sqlite

from gpuslo.engine.errors import StoreError
from gpuslo.engine.events import Event, canonical_json, parse_event
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.event_insert import EVENT_COLUMNS, _stored_ids_sqlite, sqlite_time, stored_ids
from gpuslo.engine.store.models import EventRow
from gpuslo.engine.store.read_models import EventFilter
from gpuslo.engine.store.repository import event_bodies, list_events, store_events, unprocessed_events

RECEIVED = datetime(2026, 11, 29, 14, 0, 0, 250, tzinfo=timezone(timedelta(hours=2)))


def _event(event_id: str, time: str = "2026-11-29T12:00:00.123456Z", **fields: Any) -> Event:
    obj = {"id": event_id, "kind": "nccl_timeout", "time": time, "host": "node-é", "gpu": 3, "pid": 4242,
           "job": "train-1", "rank": 5, "source": "logs", "gpu_uuid": "GPU-1", "labels": {"team": "infra"},
           "attrs": {"op": "ALLREDUCE", "seq": 7, "timeout_ms": 600000.5}, "message": "watchdog"}
    return parse_event({**obj, **fields})


def _orm_row(event: Event, row_id: str) -> EventRow:
    """The row as the ORM writes it (JSON column serialized by the dialect, times through UTCDateTime)."""
    body = event.to_dict()
    return EventRow(id=row_id, kind=event.kind, time=event.time, host=event.host, gpu=event.gpu,
                    gpu_uuid=event.gpu_uuid, pid=event.pid, job=event.job, rank=event.rank, source=event.source,
                    body=body, body_hash=hashlib.sha256(
                        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest(),
                    received_at=RECEIVED, processed_at=None, time_sent=event.time_sent)


def _raw_rows(database: Database) -> dict[str, dict[str, Any]]:
    columns = ", ".join(name for name in EVENT_COLUMNS if name != "body")
    with database.engine.connect() as connection:
        rows = connection.execute(text(f"SELECT {columns}, processed_at FROM events")).mappings().all()
    return {row["id"]: dict(row) for row in rows}


@pytest.mark.parametrize("time", ["2026-11-29T12:00:00.123456Z", "2026-11-29T12:00:00Z", "2000-01-01T00:00:00+00:00",
                                  "2026-12-31T23:59:59.999999-00:00"])
def test_rows_are_the_ones_the_orm_writes(database: Database, time: str) -> None:
    event = _event("fast", time)
    with database.session() as session:
        assert store_events(session, [event], now=RECEIVED) == ["accepted"]
        session.add(_orm_row(event, "orm"))
    rows = _raw_rows(database)
    fast, orm = rows.pop("fast"), rows.pop("orm")
    assert {**fast, "id": "orm"} == orm  # raw column values, SQLite's time text included


def test_sqlite_time_is_sqlalchemys_storage_format() -> None:
    dialect = sqlite.dialect()
    bind = EventRow.__table__.c.time.type.dialect_impl(dialect).bind_processor(dialect)
    for moment in (datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC), datetime(999, 1, 1, tzinfo=UTC),
                   datetime(2026, 6, 1, 0, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))):
        assert sqlite_time(moment) == bind(moment)


def test_body_is_the_canonical_text_its_hash_digests(database: Database) -> None:
    event = _event("e-1")
    with database.session() as session:
        store_events(session, [event], now=RECEIVED)
    with database.engine.connect() as connection:
        body, body_hash = connection.execute(text("SELECT CAST(body AS TEXT), body_hash FROM events")).one()
    assert body == canonical_json(event.to_dict())
    assert hashlib.sha256(body.encode()).hexdigest() == body_hash == event.body_hash()
    with database.session(readonly=True) as session:
        assert [r.event for r in unprocessed_events(session, 10)] == [event]
        assert [s.event for s in list_events(session, EventFilter()).items] == [event]


def test_events_stored_before_still_compare_by_their_hash(database: Database) -> None:
    event = _event("old")
    with database.session() as session:
        session.add(_orm_row(event, "old"))
    changed = _event("old", attrs={"op": "ALLREDUCE", "seq": 8})
    with database.session() as session:
        assert store_events(session, [event, changed, _event("new")]) == ["duplicate", "conflict", "accepted"]


def test_integral_float_in_an_integer_field(database: Database) -> None:
    event = _event("f", gpu=2.0, rank=1.0)
    with database.session() as session:
        assert store_events(session, [event, _event("g")], now=RECEIVED) == ["accepted", "accepted"]
    with database.session() as session:
        assert store_events(session, [event]) == ["duplicate"]
    row = _raw_rows(database)["f"]
    assert (row["gpu"], row["rank"]) == (2, 1)


def test_batch_with_repeats_and_stored_ids(database: Database) -> None:
    with database.session() as session:
        store_events(session, [_event(f"s{i}") for i in range(3)])
    batch = [_event(f"s{i}") for i in range(700)] + [_event("s1"), _event("s5", host="other")]
    with database.session() as session:
        statuses = store_events(session, batch)
    assert statuses[:3] == ["duplicate"] * 3 and statuses[3:700] == ["accepted"] * 697
    assert statuses[700:] == ["duplicate", "conflict"]
    assert len(_raw_rows(database)) == 700


def test_naive_event_time_is_refused_and_nothing_is_written(database: Database) -> None:
    naive = Event(id="naive", kind="gpu_xid", time=datetime(2026, 1, 1), host="h", attrs={"xid": 79})
    with pytest.raises(StoreError, match="naive datetime"), database.session() as session:
        store_events(session, [_event("ok"), naive])
    assert _raw_rows(database) == {}


def test_bodies_built_before_the_transaction_store_the_same_rows(database: Database) -> None:
    with database.session() as session:
        store_events(session, [_event("b2")], now=RECEIVED)
    batch = [_event(f"b{i}") for i in range(5)] + [_event("b1"), _event("b2", host="other")]
    with database.session() as session:
        statuses = store_events(session, batch, now=RECEIVED, bodies=event_bodies(batch))
    assert statuses == ["accepted", "accepted", "duplicate", "accepted", "accepted", "duplicate", "conflict"]
    with database.engine.connect() as connection:
        stored = dict(connection.execute(text("SELECT id, body_hash FROM events")).tuples().all())
    assert stored == {e.id: e.body_hash() for e in batch[:5]}
    with database.session(readonly=True) as session:
        assert sorted((r.event for r in unprocessed_events(session, 10)), key=lambda e: e.id) == batch[:5]


def test_bodies_that_do_not_match_the_events_are_refused(database: Database) -> None:
    batch = [_event("c1"), _event("c2")]
    with pytest.raises(StoreError, match="1 bodies for 2 events"), database.session() as session:
        store_events(session, batch, bodies=event_bodies(batch[:1]))
    assert _raw_rows(database) == {}


def test_sqlites_driver_sql_finds_the_ids_sqlalchemys_statement_finds(tmp_path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'ids.db'}")
    database.upgrade()
    try:
        with database.session() as session:
            store_events(session, [_event(f"i{n}") for n in range(0, 1200, 2)], now=RECEIVED)
        asked = [f"i{n}" for n in range(1200)] + ["i'; DROP TABLE events; --", "i0"]
        with database.session(readonly=True) as session:
            found = _stored_ids_sqlite(session, asked)
            assert found == stored_ids(session, asked) and len(found) == 600
    finally:
        database.dispose()


def test_two_writers_inserting_overlapping_ids_in_opposite_orders_do_not_deadlock() -> None:
    """PostgreSQL: each transaction inserts 4,000 ids, one batch in ascending and one in descending order, both
    started together and held open after the insert. Before the inserts went in id order this deadlocked (one
    transaction refused with `deadlock detected`); now one waits for the other, both commit, and each id is
    inserted by exactly one of them."""
    ids = [f"ov-{i:05d}" for i in range(4000)]
    with scratch_database("insert_order") as database:
        start = Barrier(2)

        def write(order: list[str]) -> set[str]:
            events = [_event(event_id) for event_id in order]
            with database.session() as session:
                session.execute(text("SELECT 1"))  # connected before the race starts
                start.wait(timeout=30)
                statuses = store_events(session, events)
                session.execute(text("SELECT pg_sleep(0.2)"))  # the other writer meets our uncommitted rows
            return {event_id for event_id, status in zip(order, statuses, strict=True) if status == "accepted"}

        with ThreadPoolExecutor(2) as pool:
            ascending = pool.submit(write, ids)
            descending = pool.submit(write, ids[::-1])
            first, second = ascending.result(timeout=60), descending.result(timeout=60)
        assert first | second == set(ids) and not first & second
        assert len(_raw_rows(database)) == len(ids)
