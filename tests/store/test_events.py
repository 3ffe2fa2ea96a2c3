"""Event ingest (idempotent by id and body), the engine's work queue, and event listing."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store import Database, EventFilter
from gpuslo.engine.store.repository import list_events, mark_processed, store_events, unprocessed_events

NOW = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)


def _all_events(database: Database):
    with database.session(readonly=True) as session:
        return list_events(session, EventFilter(), page_size=1000).items


def test_new_events_are_accepted_and_read_back_equal(database: Database, make_event) -> None:
    events = [make_event(labels={"zone": "a"}, message="CUDA out of memory"), make_event(kind="gpu_xid",
              attrs={"xid": 79})]
    with database.session() as session:
        assert store_events(session, events, now=NOW) == ["accepted", "accepted"]
    stored = _all_events(database)
    assert [s.event for s in reversed(stored)] == events
    assert all(s.received_at == NOW and s.processed_at is None for s in stored)


def test_same_id_and_body_is_a_duplicate_that_changes_nothing(database: Database, make_event) -> None:
    event = make_event(id="oom-1")
    with database.session() as session:
        store_events(session, [event], now=NOW)
    with database.session() as session:
        assert store_events(session, [event], now=NOW + timedelta(hours=1)) == ["duplicate"]
    (stored,) = _all_events(database)
    assert stored.event == event and stored.received_at == NOW


def test_same_id_other_body_is_a_conflict_and_nothing_is_written(database: Database, make_event) -> None:
    original = make_event(id="oom-1", host="node-a")
    with database.session() as session:
        store_events(session, [original], now=NOW)
    with database.session() as session:
        assert store_events(session, [make_event(id="oom-1", host="node-b")]) == ["conflict"]
    assert [s.event for s in _all_events(database)] == [original]


def test_duplicates_inside_one_batch(database: Database, make_event) -> None:
    a, b = make_event(id="a"), make_event(id="b")
    a_changed = make_event(id="a", host="elsewhere")
    with database.session() as session:
        statuses = store_events(session, [a, b, a, a_changed, b])
    assert statuses == ["accepted", "accepted", "duplicate", "conflict", "duplicate"]
    assert sorted((s.event for s in _all_events(database)), key=lambda e: e.id) == [a, b]


def test_mixed_batch_against_stored_events(database: Database, make_event) -> None:
    old = make_event(id="old")
    with database.session() as session:
        store_events(session, [old])
    with database.session() as session:
        statuses = store_events(session, [make_event(id="new"), old, make_event(id="old", gpu=3)])
    assert statuses == ["accepted", "duplicate", "conflict"]


def test_large_batch_is_chunked(database: Database, make_event) -> None:
    events = [make_event() for _ in range(1203)]
    with database.session() as session:
        assert store_events(session, events) == ["accepted"] * 1203
    with database.session() as session:
        assert set(store_events(session, events)) == {"duplicate"}


def test_empty_batch(database: Database) -> None:
    with database.session() as session:
        assert store_events(session, []) == []


def test_naive_time_is_refused(database: Database, make_event) -> None:
    with pytest.raises(StoreError, match="naive datetime"), database.session() as session:
        store_events(session, [make_event()], now=datetime(2025, 1, 1))


def test_concurrent_ingest_of_one_id_stores_it_once(database: Database, make_event) -> None:
    if database.dialect != "postgresql":
        return  # SQLite serializes writers with BEGIN IMMEDIATE; the race exists only on PostgreSQL
    event = make_event(id="raced")
    result: list[list[str]] = []
    with database.session() as first:
        assert store_events(first, [event]) == ["accepted"]

        def second_writer() -> None:
            with database.session() as second:
                result.append(store_events(second, [event, make_event(id="raced", gpu=7)]))

        thread = threading.Thread(target=second_writer)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the second insert should wait for the first transaction"
    thread.join(10)
    assert result == [["duplicate", "conflict"]]
    assert len(_all_events(database)) == 1


def test_unprocessed_events_oldest_first_and_mark_processed(database: Database, make_event) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    late, early, tie_b, tie_a = (make_event(id="late", time=base + timedelta(minutes=5)),
                                 make_event(id="early", time=base),
                                 make_event(id="tie-b", time=base + timedelta(minutes=1)),
                                 make_event(id="tie-a", time=base + timedelta(minutes=1)))
    with database.session() as session:
        store_events(session, [late, early, tie_b, tie_a])
    with database.session() as session:
        assert [r.event for r in unprocessed_events(session, 10)] == [early, tie_a, tie_b, late]
        assert [r.event for r in unprocessed_events(session, 2)] == [early, tie_a]
        mark_processed(session, ["early", "tie-a"], NOW)
    with database.session() as session:
        assert [r.event for r in unprocessed_events(session, 10)] == [tie_b, late]
        mark_processed(session, [], NOW)
    processed = {s.event.id: s.processed_at for s in _all_events(database)}
    assert processed == {"early": NOW, "tie-a": NOW, "tie-b": None, "late": None}


def test_times_round_trip_as_utc(database: Database, make_event) -> None:
    plus_two = timezone(timedelta(hours=2))
    event = make_event(time="2025-03-04T05:06:07.123456Z")
    received = datetime(2025, 3, 4, 7, 30, 0, 999999, tzinfo=plus_two)
    with database.session() as session:
        store_events(session, [event], now=received)
        mark_processed(session, [event.id], received)
    (stored,) = _all_events(database)
    for moment in (stored.event.time, stored.received_at, stored.processed_at):
        assert moment is not None and moment.utcoffset() == timedelta(0)
    assert stored.event.time == datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
    assert stored.received_at == received and stored.received_at.tzinfo == UTC
    if database.dialect == "sqlite":  # stored as naive UTC text, so it sorts and compares as time
        with database.engine.connect() as connection:
            raw = connection.execute(text("SELECT received_at FROM events")).scalar()
        assert str(raw).startswith("2025-03-04 05:30:00.999999")


def test_list_events_newest_first_with_pages(database: Database, make_event) -> None:
    events = [make_event(id=f"e{i:02d}") for i in range(7)]
    with database.session() as session:
        store_events(session, events)
        first = list_events(session, EventFilter(), page=1, page_size=3)
        last = list_events(session, EventFilter(), page=3, page_size=3)
        beyond = list_events(session, EventFilter(), page=4, page_size=3)
    assert [s.event.id for s in first.items] == ["e06", "e05", "e04"]
    assert (first.page, first.page_size, first.total, first.has_next) == (1, 3, 7, True)
    assert [s.event.id for s in last.items] == ["e00"] and not last.has_next
    assert beyond.items == () and beyond.total == 7


@pytest.mark.parametrize(("filters", "expected"), [
    (EventFilter(kind="gpu_xid"), {"xid"}),
    (EventFilter(host="node-b"), {"b-oom"}),
    (EventFilter(gpu=3), {"xid"}),
    (EventFilter(job="train-7"), {"b-oom"}),
    (EventFilter(since=datetime(2025, 1, 1, 0, 0, 2, tzinfo=UTC)), {"b-oom", "xid"}),
    (EventFilter(until=datetime(2025, 1, 1, 0, 0, 2, tzinfo=UTC)), {"a-oom", "b-oom"}),
    (EventFilter(host="node-a", kind="cuda_oom"), {"a-oom"}),
])
def test_list_events_filters(database: Database, make_event, filters: EventFilter,
                             expected: set[str]) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    with database.session() as session:
        store_events(session, [
            make_event(id="a-oom", time=base + timedelta(seconds=1)),
            make_event(id="b-oom", host="node-b", job="train-7", time=base + timedelta(seconds=2)),
            make_event(id="xid", kind="gpu_xid", gpu=3, attrs={"xid": 79}, time=base + timedelta(seconds=3)),
        ])
        page = list_events(session, filters)
    assert {s.event.id for s in page.items} == expected and page.total == len(expected)


def test_bad_page_is_refused(database: Database) -> None:
    with pytest.raises(StoreError, match="page must be"), database.session() as session:
        list_events(session, EventFilter(), page=0)
