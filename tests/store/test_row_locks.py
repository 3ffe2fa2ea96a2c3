"""Row locks on the real PostgreSQL: a writer folding a match into a violation (and an acknowledge) locks the
violation FOR NO KEY UPDATE, so another transaction can still write rows that cite it (an SLO cause, evidence):
with FOR UPDATE, two fleet workers each holding violations the other's SLO causes cite deadlocked (CI, stop 26).
A deadlock PostgreSQL breaks comes back as TransactionConflict, which fleet workers run again without a
traceback."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from gpuslo.engine.errors import StoreError, TransactionConflict
from gpuslo.engine.store import Database
from gpuslo.engine.store.lifecycle import acknowledge
from gpuslo.engine.store.repository import store_events
from gpuslo.engine.store.violations import record_match

NOW = datetime(2025, 1, 2, tzinfo=UTC)
_CAUSE = text("INSERT INTO slo_causes (slo_id, group_key, minute, violation_id, bad) "
              "VALUES ('ttft', 'endpoint=/v1', :minute, :id, 1)")


# Row locks are PostgreSQL's: SQLite serializes writers with BEGIN IMMEDIATE.
pytestmark = pytest.mark.parametrize("database", ["postgresql"], indirect=True)


def _violation(database: Database, make_event, make_match) -> tuple[int, object]:
    event = make_event(host="node-1")
    with database.session() as session:
        store_events(session, [event])
        view = record_match(session, make_match([event]), now=NOW)
    return view.id, event


def _cite_while_locked(database: Database, lock: Callable[[Session], object], violation_id: int) -> str:
    """Hold `lock(session)` open in one transaction; in another, insert a cause citing the violation with a 2 s
    lock timeout; 'written' or the error's first line."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with database.session() as session:
            lock(session)
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(10)
        try:
            with database.session() as session:
                session.execute(text("SET LOCAL lock_timeout = '2s'"))
                session.execute(_CAUSE, {"minute": 1, "id": violation_id})
        except StoreError as exc:
            return str(exc)
        return "written"
    finally:
        release.set()
        thread.join(10)


def test_a_cause_can_cite_a_violation_a_match_is_folding_into(database: Database, make_event, make_match) -> None:
    violation_id, event = _violation(database, make_event, make_match)
    again = make_match([event], summary="again")
    assert _cite_while_locked(database, lambda s: record_match(s, again, now=NOW), violation_id) == "written"
    with database.engine.connect() as connection:
        assert connection.execute(text("SELECT occurrences FROM violations WHERE id = :id"),
                                  {"id": violation_id}).scalar() == 2


def test_a_cause_can_cite_a_violation_being_acknowledged(database: Database, make_event, make_match) -> None:
    violation_id, _event = _violation(database, make_event, make_match)
    assert _cite_while_locked(database, lambda s: acknowledge(s, violation_id, actor="oncall", now=NOW),
                              violation_id) == "written"


def test_the_control_a_for_update_lock_blocks_the_citing_row(database: Database, make_event, make_match) -> None:
    """What the fix removed: FOR UPDATE (the old lock) makes the citing insert wait out its lock timeout."""
    violation_id, _event = _violation(database, make_event, make_match)
    old_lock = text("SELECT id FROM violations WHERE id = :id FOR UPDATE")
    outcome = _cite_while_locked(database, lambda s: s.execute(old_lock, {"id": violation_id}), violation_id)
    assert "lock timeout" in outcome


def test_a_deadlock_comes_back_as_a_transaction_conflict(database: Database, make_event, make_match) -> None:
    """Two transactions lock two violations in opposite orders; PostgreSQL aborts one of them."""
    first, event = _violation(database, make_event, make_match)
    other = make_event(host="node-2")
    with database.session() as session:
        store_events(session, [other])
        second = record_match(session, make_match([other]), now=NOW).id
    barrier = threading.Barrier(2, timeout=10)
    outcomes: dict[str, BaseException | None] = {}

    def lock_both(name: str, order: tuple[int, int]) -> None:
        try:
            with database.session() as session:
                session.execute(text("SET LOCAL deadlock_timeout = '100ms'"))
                session.execute(text("SELECT id FROM violations WHERE id = :id FOR NO KEY UPDATE"), {"id": order[0]})
                barrier.wait()
                session.execute(text("SELECT id FROM violations WHERE id = :id FOR NO KEY UPDATE"), {"id": order[1]})
            outcomes[name] = None
        except BaseException as exc:  # noqa: BLE001  # the outcome under test
            outcomes[name] = exc

    threads = [threading.Thread(target=lock_both, args=("a", (first, second))),
               threading.Thread(target=lock_both, args=("b", (second, first)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    errors = [exc for exc in outcomes.values() if exc is not None]
    assert len(outcomes) == 2 and len(errors) == 1, outcomes
    assert isinstance(errors[0], TransactionConflict), repr(errors[0])
    assert "deadlock detected" in str(errors[0])
