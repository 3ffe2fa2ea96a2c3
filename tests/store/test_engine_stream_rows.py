"""The engine's write of a fixed event stream (bench/engine.py's mixed fleet stream evaluated by the shipped rulebooks)
stores the same rows through the driver-SQL statements (engine/store/driver_sql.py: the violations' multi-row INSERT
... RETURNING, the updates, evidence trims and links and history lines (the INSERTs and the UPDATE from
json_populate_recordset on PostgreSQL; the violations' INSERT checked to be sent so), processed_at's expanded IN
list; engine/store/driver_select.py: the lookups of stored violations, reopens and evidence) as through SQLAlchemy's
own execution of the same statements, on both databases: every violation column, evidence row, history line,
outbox-facing view and processed_at; and every lookup returns the values SQLAlchemy returns, of the same types."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql.expression import ClauseElement

from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.store import Database, evidence, repository, violations
from gpuslo.engine.store.driver_select import driver_select
from gpuslo.engine.store.engine_output import record_result
from gpuslo.engine.store.models import Base, EventRow, EvidenceRow, HistoryRow, ViolationRow
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.store.rows import violation_fields

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


class _Sqlalchemy:
    """The statement executed by SQLAlchemy with its own bind processing (what the write path did before)."""

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


def _typed(rows: Sequence[Any]) -> list[Any]:
    """Rows with each value's type beside it (True == 1 and a naive time == nothing aware: both must differ)."""
    def one(value: Any) -> Any:
        return (type(value).__name__, value, getattr(value, "tzinfo", None))
    return [{k: one(v) for k, v in row.items()} if isinstance(row, Mapping) else tuple(one(v) for v in row)
            for row in rows]


class _Compared:
    """The driver-SQL lookup, run beside SQLAlchemy's execution of the same statement; each pair of answers kept."""

    def __init__(self, found: Any, statement: ClauseElement, answers: list[tuple[Any, Any]]):
        self._found, self._reference, self._answers = found, _Sqlalchemy(statement), answers

    def rows(self, connection: Connection, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        ours = self._found.rows(connection, parameters)
        self._answers.append((_typed(ours), _typed(self._reference.rows(connection, parameters))))
        return ours  # type: ignore[no-any-return]

    def mappings(self, connection: Connection, parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
        ours = self._found.mappings(connection, parameters)
        self._answers.append((_typed(ours), _typed(self._reference.mappings(connection, parameters))))
        return ours  # type: ignore[no-any-return]


def _stream() -> tuple[list[Any], list[Any]]:
    sys.path.insert(0, str(ROOT / "bench"))
    import engine_workload as workload

    good, problems = load_directory(ROOT / "rules")
    assert not problems
    evaluator = RuleEvaluator()
    evaluator.load(good)
    events = [workload.to_event(item) for item in workload.mixed(4000, prefix="rows", seed=11)]
    return events, [evaluator.evaluate_batch(events[i:i + 500]) for i in range(0, len(events), 500)]


def _play(database: Database, events: list[Any], results: list[Any]) -> list[ViolationView]:
    notified: list[ViolationView] = []

    def notify(_session: Session, view: ViolationView, _now: datetime) -> None:
        notified.append(view)

    with database.session() as session:
        repository.store_events(session, events, now=NOW)
    for index, result in enumerate(results):
        with database.session() as session:
            record_result(session, result, NOW + timedelta(seconds=index), notify, evidence_stored=True)
    return notified


def _snapshot(database: Database, notified: list[ViolationView]) -> dict[str, Any]:
    with database.session(readonly=True) as session:
        rows = list(session.scalars(select(ViolationRow)))
        key = {row.id: (row.rule_id, row.group_key, row.created_at) for row in rows}
        return {
            "violations": {key[row.id]: {**violation_fields(row), "id": None} for row in rows},
            "evidence": sorted((key[e.violation_id], e.position, e.event_id, e.added_at)
                               for e in session.scalars(select(EvidenceRow))),
            "history": sorted(((key[h.violation_id], h.at, h.action, h.actor, repr(h.detail), h.status_before,
                                h.status_after) for h in session.scalars(select(HistoryRow))), key=repr),
            "processed": sorted(session.execute(select(EventRow.id, EventRow.processed_at)).all()),
            "notified": [{**view.__dict__, "id": key[view.id]} for view in notified],
        }


def _whole_table_lookups(database: Database, answers: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """The stream's lookups again over every stored violation (resolved ones, long ago, included), each compared
    through `violations.driver_select` as the stream's were; the candidates the driver SQL returned."""
    with database.session() as session:
        connection = session.connection()
        stored = session.execute(select(ViolationRow.id, ViolationRow.rule_id, ViolationRow.group_key)).all()
        since = datetime(2000, 1, 1, tzinfo=UTC)
        pairs = [(rule_id, group_key) for _, rule_id, group_key in stored]
        ids = [violation_id for violation_id, _, _ in stored]
        lists = {"rules": sorted({r for r, _ in pairs}), "keys": sorted({k for _, k in pairs})}
        for statement in (violations._CANDIDATES, violations._CANDIDATES_BY_PAIR):  # both run on both databases
            violations.driver_select(connection.dialect, statement).mappings(
                connection, {**(lists if statement is violations._CANDIDATES else {}), "pairs": pairs,
                             "since": since})
        violations.driver_select(connection.dialect, violations._REOPENS).rows(connection,
                                                                              {"ids": ids, "since": since})
        violations.driver_select(connection.dialect, violations._STORED_TEXT).mappings(connection, {"ids": ids})
    return answers[-4][0]  # type: ignore[no-any-return]


def _emptied(database: Database, tmp_path: Path) -> Database:
    """The reference database: the same PostgreSQL database emptied (as the superuser: the audit log's
    append-only triggers off), or a fresh SQLite file."""
    if database.engine.dialect.name == "sqlite":
        reference = Database(f"sqlite:///{tmp_path / 'reference.db'}")
        reference.upgrade()
        return reference
    with database.engine.begin() as connection:
        connection.execute(text("SET LOCAL session_replication_role = replica"))
        for table in reversed(Base.metadata.sorted_tables):
            connection.execute(table.delete())
    return database


def test_a_fixed_stream_stores_the_rows_sqlalchemy_execution_stored(database: Database, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    events, results = _stream()
    answers: list[tuple[Any, Any]] = []

    def compared(dialect: Any, statement: Any) -> _Compared:
        return _Compared(driver_select(dialect, statement), statement, answers)

    sent: list[str] = []

    def capture(_connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    event.listen(database.engine, "before_cursor_execute", capture)
    with monkeypatch.context() as patch:
        patch.setattr(violations, "driver_select", compared)
        patch.setattr(evidence, "driver_select", compared)
        driven = _snapshot(database, _play(database, events, results))
        whole = _whole_table_lookups(database, answers)
    event.remove(database.engine, "before_cursor_execute", capture)
    creates = [sql for sql in sent if sql.startswith("INSERT INTO violations ")]
    assert creates and all(("json_populate_recordset" in sql and "RETURNING id, rule_id, group_key" in sql)
                           == (database.engine.dialect.name == "postgresql") for sql in creates)
    reference = _emptied(database, tmp_path)

    def sqlalchemy_statement(_dialect: Any, statement: ClauseElement, _keys: Sequence[str] = ()) -> _Sqlalchemy:
        return _Sqlalchemy(statement)

    monkeypatch.setattr(violations, "driver_statement", sqlalchemy_statement)
    monkeypatch.setattr(evidence, "driver_statement", sqlalchemy_statement)
    monkeypatch.setattr(repository, "expanding_statement", sqlalchemy_statement)
    monkeypatch.setattr(violations, "driver_select", sqlalchemy_statement)
    monkeypatch.setattr(evidence, "driver_select", sqlalchemy_statement)
    try:
        expected = _snapshot(reference, _play(reference, events, results))
    finally:
        if reference is not database:
            reference.dispose()
    # the stream opens, folds and resolves violations, and marks every event processed
    assert len(driven["violations"]) > 20 and driven["evidence"] and driven["notified"]
    assert {status for v in driven["violations"].values() for status in [v["status"]]} >= {"open", "resolved"}
    assert all(at is not None for _, at in driven["processed"]) and len(driven["processed"]) == len(events)
    assert driven == expected
    # the lookups answered as SQLAlchemy does: stored violations (resolved ones with times and flags among them)
    assert len(answers) >= len(results) and any(ours for ours, _ in answers)
    for ours, reference in answers:
        assert ours == reference
    assert {"open", "resolved"} <= {row["status"][1] for row in whole} and len(whole) == len(driven["violations"])
