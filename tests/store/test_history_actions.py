"""Every history action of the models fits the column, passes the database's check, and is documented."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store import Database, repository, violations
from gpuslo.engine.store.models import ACTION_LENGTH, ACTIONS
from gpuslo.engine.store.rows import append_history

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
NOW = datetime(2025, 1, 1, 0, 1, tzinfo=UTC)


def test_every_action_fits_the_column_and_passes_the_database_check(database: Database, make_event,
                                                                     make_match) -> None:
    columns = {c["name"]: c for c in inspect(database.engine).get_columns("violation_history")}
    assert max(len(a) for a in ACTIONS) <= ACTION_LENGTH == columns["action"]["type"].length
    event = make_event()
    with database.session() as session:
        repository.store_events(session, [event], now=NOW)
        violation_id = violations.record_match(session, make_match([event]), now=NOW).id
    with database.session() as session:
        for action in ACTIONS:
            append_history(session, violation_id, NOW, action, {}, actor="alice")
    with database.session(readonly=True) as session:
        stored = repository.get_violation(session, violation_id)
    assert stored is not None and [h.action for h in stored.history] == ["created", *ACTIONS]
    with pytest.raises(StoreError), database.session() as session:
        append_history(session, violation_id, NOW, "notification_lost", {}, actor="alice")


def test_every_action_is_documented_with_the_violation_api() -> None:
    section = API_DOC.read_text(encoding="utf-8").split("## GET /api/v1/violations/{id}\n", 1)[1].split("\n## ", 1)[0]
    assert [a for a in ACTIONS if not re.search(rf"`{a}`", section)] == []
