"""The engine's executemany statements sent as driver SQL (engine/store/driver_sql.py) store exactly what
SQLAlchemy's own execution of the same statements stores, on both databases."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import psycopg
from sqlalchemy.sql.expression import ClauseElement
from test_batch import NOW, _run, _scenario, _snapshot

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store import Database, driver_sql, evidence, repository, violations
from gpuslo.engine.store.models import EventRow

TIMES = [datetime(2026, 12, 2, 8, 0, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
         datetime(2001, 2, 3, 4, 5, 6, 999999, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
         datetime.fromisoformat("2026-03-29T02:30:00+02:00")]


@pytest.mark.parametrize("dialect", [sqlite.dialect(), psycopg.dialect()], ids=["sqlite", "postgresql"])
def test_each_conversion_binds_what_sqlalchemys_processor_binds(dialect: Any) -> None:
    statement = violations._CHANGE  # noqa: SLF001
    columns = [c.key for c in violations._VIOLATIONS.c if c.key != "id"] + ["row_id"]  # noqa: SLF001
    compiled = statement.compile(dialect=dialect, column_keys=columns, for_executemany=True)
    ours = dict(driver_sql.driver_statement(dialect, statement, columns).convert)
    assert set(ours) == set(compiled._bind_processors)  # noqa: SLF001
    samples = {"json": [{"a": [1, 2.5, None, "é"]}, {"big": 2**70}, {"n": {"1": True}}, None],
               "time": [*TIMES, None], "bool": [True, False, None], "float": [0.0, 3, 2.5, None]}
    for name, processor in compiled._bind_processors.items():  # noqa: SLF001
        type_name = type(compiled.binds[name].type).__name__
        kind = {"JSON": "json", "UTCDateTime": "time", "Boolean": "bool", "Float": "float"}[type_name]
        for value in samples[kind]:
            theirs, mine = processor(value), ours[name](value)
            if kind == "json":  # the text may differ in spacing; what it reads back as may not
                theirs = getattr(theirs, "obj", theirs)  # psycopg's Json wrapper holds the value
                assert (None if mine is None else json.loads(mine)) == (
                    theirs if dialect.name == "postgresql" or theirs is None else json.loads(theirs))
            else:
                assert type(mine) is type(theirs) and mine == theirs, (name, value)


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(StoreError, match="naive"):
        driver_sql.sqlite_time(datetime(2026, 1, 1))
    with pytest.raises(StoreError, match="naive"):
        driver_sql.postgresql_time(datetime(2026, 1, 1))


def test_a_column_needing_other_processing_is_refused() -> None:
    """A type this module does not convert (an Interval has a bind processor on SQLite) is refused when the
    statement is compiled; columns needing no processing (strings) pass as they are."""
    from sqlalchemy import Column, Interval, MetaData, Table, insert

    table = Table("t", MetaData(), Column("span", Interval))
    with pytest.raises(StoreError, match="needs bind processing"):
        driver_sql.driver_statement(sqlite.dialect(), insert(table), ["span"])
    assert driver_sql.driver_statement(sqlite.dialect(), insert(EventRow.__table__), ["id", "kind"]).convert == ()


class _SqlalchemyStatement:
    """What driver_statement returned before: SQLAlchemy executes the statement with its own bind processing."""

    def __init__(self, statement: ClauseElement):
        self._statement = statement

    def executemany(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            connection.execute(self._statement, list(rows))

    def write_rows(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        self.executemany(connection, rows)

    def insert_returning(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in connection.execute(self._statement, list(rows)).all()]

    def execute(self, connection: Connection, parameters: Mapping[str, Any]) -> Any:
        return connection.execute(self._statement, dict(parameters))

    def rows(self, connection: Connection, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in connection.execute(self._statement, dict(parameters)).all()]

    def mappings(self, connection: Connection, parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [dict(row) for row in connection.execute(self._statement, dict(parameters)).mappings().all()]


def test_the_engine_writes_store_what_sqlalchemy_execution_stored(database: Database, tmp_path: Path,
                                                                  make_event, make_match,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold scenario of test_batch (new, folded, reopened, acknowledged and resolved violations, the evidence
    cap and its trims, history details) stored through driver SQL and through SQLAlchemy's execution: every
    violation column, evidence row and history line equal."""
    events, rounds = _scenario(make_event, make_match)
    driven = _snapshot(database, _run(database, events, rounds, batched=True))
    if database.engine.dialect.name == "postgresql":  # the reference runs on the same dialect, emptied
        reference = database
        with database.engine.begin() as connection:
            for table in ("evidence", "violation_history", "violations", "events"):
                connection.exec_driver_sql(f"DELETE FROM {table}")
    else:
        reference = Database(f"sqlite:///{tmp_path / 'reference.db'}")
        reference.upgrade()

    def sqlalchemy_statement(_dialect: Any, statement: ClauseElement, _keys: Sequence[str]) -> Any:
        return _SqlalchemyStatement(statement)

    monkeypatch.setattr(violations, "driver_statement", sqlalchemy_statement)
    monkeypatch.setattr(evidence, "driver_statement", sqlalchemy_statement)
    monkeypatch.setattr(repository, "expanding_statement", lambda _dialect, statement: _SqlalchemyStatement(statement))
    for module in (violations, evidence):  # the lookups too (driver_select.py)
        monkeypatch.setattr(module, "driver_select", lambda _dialect, statement: _SqlalchemyStatement(statement))
    try:
        expected = _snapshot(reference, _run(reference, events, rounds, batched=True))
    finally:
        if reference is not database:
            reference.dispose()
    assert driven["violations"] and driven["evidence"] and driven["history"]
    assert driven == expected


def test_history_lines_in_one_statement_read_back_as_sqlalchemy_execution_stored(database: Database, make_event,
                                                                                   make_match) -> None:
    """write_rows (PostgreSQL: one INSERT from json_populate_recordset; SQLite: the executemany) stores what
    SQLAlchemy's execution stores: nested JSON with floats, unicode and nulls, times of another zone, NULL
    columns; a detail orjson refuses (an integer beyond 64 bits) goes by the executemany instead."""
    from sqlalchemy import select

    from gpuslo.engine.store.models import HistoryRow

    events = [make_event(id=f"h{i}") for i in range(2)]
    at = datetime(2026, 6, 30, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    details = [{"seen_at": "2026-12-02T08:09:10Z", "ratio": 0.1 + 0.2, "text": "é ✓ \"quoted\"\n",
                "nested": {"list": [1, None, True, 2.5e-300]}, "none": None}, {"big": 2**70}, {}]
    with database.session() as session:
        repository.store_events(session, events, now=NOW)
        violation_id = violations.record_match(session, make_match(events), now=NOW).id
        connection = session.connection()
        rows = [{"violation_id": violation_id, "at": at, "action": "commented", "actor": "me", "detail": detail,
                 "status_before": None, "status_after": "open", "source": None, "comment": f"c{i}"}
                for i, detail in enumerate(details)]
        statement = driver_sql.driver_statement(connection.dialect, violations._HISTORY, list(rows[0]))
        assert (statement.recordset is not None) == (connection.dialect.name == "postgresql")
        statement.write_rows(connection, rows[:1] + rows[2:])
        statement.write_rows(connection, rows[1:2])  # orjson refuses 2**70: the executemany
        connection.execute(violations._HISTORY, [{**row, "comment": f"reference {row['comment']}"} for row in rows])
        stored = {row.comment: (row.at, row.detail, row.status_before, row.source, row.actor)
                  for row in session.scalars(select(HistoryRow).where(HistoryRow.action == "commented"))}
    assert len(stored) == 6
    for i in range(3):
        assert stored[f"c{i}"] == stored[f"reference c{i}"]
        assert repr(stored[f"c{i}"][1]) == repr(details[i])


@pytest.mark.parametrize("dialect", [sqlite.dialect(), psycopg.dialect()], ids=["sqlite", "postgresql"])
def test_driver_select_refuses_what_it_cannot_render(dialect: Any) -> None:
    """A NOT IN list, a list whose items need bind processing (times) and an empty list are refused, with the
    list's name; a tuple list renders as SQLAlchemy's VALUES on SQLite and as an unnest on PostgreSQL."""
    from sqlalchemy import bindparam, select, tuple_

    from gpuslo.engine.store.driver_select import driver_select
    from gpuslo.engine.store.models import ViolationRow

    v = ViolationRow.__table__.c
    with pytest.raises(StoreError, match="'rules' is not one IN list"):
        driver_select(dialect, select(v.id).where(v.rule_id.not_in(bindparam("rules", expanding=True))))
    with pytest.raises(StoreError, match="'times' needs bind processing"):
        driver_select(dialect, select(v.id).where(v.first_seen.in_(bindparam("times", expanding=True))))
    pairs = driver_select(dialect, select(v.id).where(
        tuple_(v.rule_id, v.group_key).in_(bindparam("pairs", expanding=True))))
    with pytest.raises(StoreError, match="the list 'pairs' is empty"):
        pairs.rows(None, {"pairs": []})  # type: ignore[arg-type]  # refused before any connection is used
    sql, bound = pairs._bound({"pairs": [("r", "k1"), ("r", "k2")]})
    if dialect.name == "sqlite":
        assert "IN (VALUES (?, ?), (?, ?))" in sql and bound == ("r", "k1", "r", "k2")
    else:
        arrays = "CAST(%(pairs_0)s AS VARCHAR(200)[]), CAST(%(pairs_1)s AS VARCHAR(512)[])"
        assert f"IN (SELECT * FROM unnest({arrays}))" in sql
        assert bound == {"pairs_0": ["r", "r"], "pairs_1": ["k1", "k2"]}


def test_an_update_of_many_rows_keeps_the_executemany_order(database: Database, make_event, make_match) -> None:
    """write_rows of the violations' UPDATE (PostgreSQL: one UPDATE ... FROM json_populate_recordset) changes each
    row as the executemany does, JSON and flags included; rows that repeat a violation go by the executemany, so
    the last one wins as it did."""
    from sqlalchemy import select

    from gpuslo.engine.store.models import ViolationRow

    with database.session() as session:
        repository.store_events(session, [make_event(id="u0"), make_event(id="u1")], now=NOW)
        ids = [violations.record_match(session, make_match([make_event(id=f"u{i}")], group_key=f"g{i}"),
                                       now=NOW).id for i in range(2)]
        connection = session.connection()
        rows = [{"row_id": ids[0], "summary": "first", "flapping": True, "labels": {"a": [1.5, None]}},
                {"row_id": ids[1], "summary": "other", "flapping": False, "labels": {}}]
        statement = driver_sql.driver_statement(connection.dialect, violations._CHANGE, list(rows[0]))
        statement.write_rows(connection, rows)
        statement.write_rows(connection, [{**rows[0], "summary": "second"}, {**rows[0], "summary": "third"}])
        stored = {row.id: (row.summary, row.flapping, row.labels)
                  for row in session.scalars(select(ViolationRow).where(ViolationRow.id.in_(ids)))}
    assert stored == {ids[0]: ("third", True, {"a": [1.5, None]}), ids[1]: ("other", False, {})}


def test_new_violations_returned_ids_map_to_their_rows(database: Database, make_event, make_match) -> None:
    """insert_returning of the new violations (PostgreSQL: one INSERT ... FROM json_populate_recordset ...
    RETURNING; a row orjson refuses, an integer beyond 64 bits in the group, by the unnest INSERT instead; SQLite:
    the multi-row VALUES) stores what SQLAlchemy's execution stores, and each returned id is the row of its rule
    and group key."""
    from sqlalchemy import select

    from gpuslo.engine.store.models import ViolationRow

    table = ViolationRow.__table__
    with database.session() as session:
        repository.store_events(session, [make_event(id="n0")], now=NOW)
        violations.record_match(session, make_match([make_event(id="n0")], group_key="seed"), now=NOW)
        connection = session.connection()
        seed = dict(connection.execute(select(table)).mappings().one())
        del seed["id"]
        groups = [{"host": "é ✓", "gpu": 3, "nested": [1.5, None, True]}, {"big": 2**70}, {}]
        rows = [{**seed, "group_key": f"k{i}", "group": group, "first_seen": TIMES[i], "occurrences": i + 1,
                 "flapping": i == 2, "resolve_after_s": None if i else 2.5} for i, group in enumerate(groups)]
        statement = driver_sql.driver_statement(connection.dialect, violations._CREATE, list(rows[0]))
        assert (statement.recordset is not None) == (connection.dialect.name == "postgresql")
        returned = statement.insert_returning(connection, [rows[2], rows[0]])
        returned += statement.insert_returning(connection, rows[1:2])  # orjson refuses 2**70: unnest on PostgreSQL
        connection.execute(violations._CREATE, [{**row, "group_key": f"reference {row['group_key']}"} for row in rows])
        stored = {row["group_key"]: dict(row) for row in connection.execute(
            select(table).where(table.c.group_key != "seed")).mappings()}
    assert sorted(key for _, _, key in returned) == ["k0", "k1", "k2"] and len(stored) == 6
    for violation_id, rule_id, group_key in returned:
        assert (stored[group_key]["id"], stored[group_key]["rule_id"]) == (violation_id, rule_id)
    for i in range(3):
        ours, theirs = stored[f"k{i}"], stored[f"reference k{i}"]
        assert {**ours, "id": None, "group_key": None} == {**theirs, "id": None, "group_key": None}
        assert repr(ours["group"]) == repr(groups[i]) and ours["first_seen"] == TIMES[i]
