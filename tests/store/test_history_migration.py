"""Migration 0005 on both databases: the history's action column takes the notification lines, keeps every
existing line on the way up, and gives the notification lines up (only them) on the way down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store import Database, lifecycle, repository, violations
from gpuslo.engine.store.db import migrations_folder
from gpuslo.engine.store.models import ACTION_LENGTH, Base
from gpuslo.engine.store.rows import append_history

NOW = datetime(2025, 1, 1, 0, 1, tzinfo=UTC)
NOTIFICATION_LINES = ("notification_dead", "notification_retried")


def _downgrade(database: Database, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", migrations_folder())
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def _action_length(database: Database) -> int:
    columns = {c["name"]: c for c in inspect(database.engine).get_columns("violation_history")}
    return columns["action"]["type"].length


def _lines(database: Database, violation_id: int) -> list[tuple[object, ...]]:
    with database.session(readonly=True) as session:
        detail = repository.get_violation(session, violation_id)
    assert detail is not None
    return [(h.id, h.at, h.action, h.actor, dict(h.detail), h.status_before, h.status_after, h.source, h.comment)
            for h in detail.history]


def _add(database: Database, violation_id: int, action: str, at: datetime = NOW) -> None:
    with database.session() as session:
        append_history(session, violation_id, at, action, {"notification_id": 1, "receiver": "pagerduty-main"},
                       actor="alice")


def _violation_with_history(database: Database, make_event, make_match) -> int:
    """A violation whose history has a line of each kind 0004 knows (made through the store, as in use)."""
    event = make_event()
    with database.session() as session:
        repository.store_events(session, [event], now=NOW)
        view = violations.record_match(session, make_match([event]), now=NOW)
    for minutes, action in enumerate(("acknowledge", "resolve", "reopen"), start=1):
        with database.session() as session:
            getattr(lifecycle, action)(session, view.id, actor="alice", comment=f"{action} it",
                                       now=NOW + timedelta(minutes=minutes), source="10.0.0.7")
    with database.session() as session:
        lifecycle.comment(session, view.id, actor="bob", comment="restarted", now=NOW + timedelta(minutes=5))
    return view.id


def test_upgrade_from_0004_keeps_the_history_and_takes_the_notification_lines(database: Database, make_event,
                                                                             make_match) -> None:
    # Made at head, then taken down to 0004: the store writes today's event columns (0006 added some).
    violation_id = _violation_with_history(database, make_event, make_match)
    _downgrade(database, "0004")
    try:
        with pytest.raises(StoreError):  # 0004's check is still in force
            _add(database, violation_id, "notification_dead")
        before = _lines(database, violation_id)
        assert [line[2] for line in before] == ["created", "acknowledged", "resolved", "reopened", "commented"]
    finally:
        database.upgrade()
    assert _lines(database, violation_id) == before
    assert _action_length(database) == ACTION_LENGTH
    for action in NOTIFICATION_LINES:
        _add(database, violation_id, action, NOW + timedelta(minutes=9))
    assert [line[2] for line in _lines(database, violation_id)[len(before):]] == list(NOTIFICATION_LINES)
    with database.engine.connect() as connection:
        assert list(compare_metadata(MigrationContext.configure(connection), Base.metadata)) == []


def test_downgrade_to_0004_drops_only_the_notification_lines(database: Database, make_event, make_match) -> None:
    violation_id = _violation_with_history(database, make_event, make_match)
    kept = _lines(database, violation_id)
    for action in NOTIFICATION_LINES:
        _add(database, violation_id, action, NOW + timedelta(minutes=9))
    _downgrade(database, "0004")
    try:
        assert _lines(database, violation_id) == kept
        assert _action_length(database) == 16
        with pytest.raises(StoreError):
            _add(database, violation_id, "notification_retried")
    finally:
        database.upgrade()
    assert _lines(database, violation_id) == kept
