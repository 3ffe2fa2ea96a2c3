"""Human actions, auto-resolve, flapping reopen and repeat notifications, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuslo.engine.errors import InvalidTransition, NotFoundError, StoreError
from gpuslo.engine.store import Database, lifecycle
from gpuslo.engine.store.repository import get_violation, store_events
from gpuslo.engine.store.violations import record_match

NOW = datetime(2025, 1, 2, tzinfo=UTC)


def later(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


@pytest.fixture
def record(database: Database, make_event, make_match):
    """`record(at_seconds, **match_overrides)`: store one new event and record its match at NOW + at_seconds."""

    def recorder(at: float = 0, **overrides):
        event = make_event()
        with database.session() as session:
            store_events(session, [event], now=later(at))
            return record_match(session, make_match([event], **overrides), now=later(at))

    return recorder


def act(database: Database, action: str, violation_id: int, at: float = 0, **kwargs):
    kwargs.setdefault("actor", "alice")
    with database.session() as session:
        return getattr(lifecycle, action)(session, violation_id, now=later(at), **kwargs)


def history(database: Database, violation_id: int):
    with database.session(readonly=True) as session:
        return get_violation(session, violation_id).history


def test_acknowledge_resolve_reopen_write_history_with_actor_and_source(database, record):
    created = record()
    assert (created.status, created.notify) == ("open", "trigger")
    acked = act(database, "acknowledge", created.id, 10, comment="looking", source="10.0.0.7")
    assert (acked.status, acked.acknowledged_by, acked.acknowledged_at, acked.notify) == (
        "acknowledged", "alice", later(10), "acknowledge")
    resolved = act(database, "resolve", created.id, 20, actor="bob", source="10.0.0.8")
    assert (resolved.status, resolved.resolved_by, resolved.resolved_at, resolved.notify) == (
        "resolved", "bob", later(20), "resolve")
    reopened = act(database, "reopen", created.id, 30, comment="came back")
    assert (reopened.status, reopened.resolved_at, reopened.acknowledged_by, reopened.quiet_since) == (
        "open", None, None, later(30))
    commented = act(database, "comment", created.id, 40, comment="  restarted the worker  ")
    assert commented.status == "open" and commented.notify is None
    rows = [(h.action, h.actor, h.status_before, h.status_after, h.source, h.comment, h.at)
            for h in history(database, created.id)]
    assert rows == [
        ("created", "engine", None, "open", None, None, NOW),
        ("acknowledged", "alice", "open", "acknowledged", "10.0.0.7", "looking", later(10)),
        ("resolved", "bob", "acknowledged", "resolved", "10.0.0.8", None, later(20)),
        ("reopened", "alice", "resolved", "open", None, "came back", later(30)),
        ("commented", "alice", "open", "open", None, "restarted the worker", later(40)),
    ]


@pytest.mark.parametrize(("setup", "action", "message"), [
    (["resolve"], "acknowledge", "violation {id} is resolved; reopen it before acknowledging"),
    (["resolve"], "resolve", "violation {id} is already resolved"),
    (["acknowledge"], "acknowledge", "violation {id} is already acknowledged"),
    ([], "reopen", "violation {id} is open, not resolved; only a resolved violation can be reopened"),
])
def test_invalid_transitions_raise_and_change_nothing(database, record, setup, action, message):
    violation = record()
    for step in setup:
        act(database, step, violation.id)
    before = history(database, violation.id)
    with pytest.raises(InvalidTransition) as caught:
        act(database, action, violation.id, 5)
    assert str(caught.value) == message.format(id=violation.id)
    assert isinstance(caught.value, StoreError)
    assert history(database, violation.id) == before


def test_missing_violation_and_empty_comment(database, record):
    with pytest.raises(NotFoundError, match="no violation with id 999"):
        act(database, "resolve", 999)
    violation = record()
    with pytest.raises(StoreError, match="comment is empty"):
        act(database, "comment", violation.id, comment="   ")


def test_reopen_refused_while_another_violation_of_the_group_is_open(database, record):
    first = record()
    act(database, "resolve", first.id)
    second = record(3600)  # beyond the flap window: a new violation
    assert second.id != first.id and second.notify == "trigger"
    with pytest.raises(InvalidTransition, match=f"violation {second.id} is already unresolved"):
        act(database, "reopen", first.id, 3700)


def test_auto_resolve_after_the_quiet_period(database, record):
    quiet = record(0, resolve_after_s=600)
    manual = record(0, rule_id="no-after")
    folded = record(300, resolve_after_s=600)  # a new match restarts the quiet period
    assert folded.id == quiet.id and folded.quiet_since == later(300)
    with database.session() as session:
        assert lifecycle.auto_resolve_due(session, later(899), {}) == []
    with database.session() as session:
        resolved = lifecycle.auto_resolve_due(session, later(900), {})
    assert [(v.id, v.status, v.resolved_by, v.notify) for v in resolved] == [
        (quiet.id, "resolved", "engine", "resolve")]
    entry = history(database, quiet.id)[-1]
    assert (entry.action, entry.actor, entry.status_before, entry.status_after) == ("resolved", "engine", "open",
                                                                                    "resolved")
    assert entry.detail["quiet_s"] == 600
    # A rule loaded with resolve.after applies to violations stored without it.
    with database.session() as session:
        assert [v.id for v in lifecycle.auto_resolve_due(session, later(960), {"no-after": 60.0})] == [manual.id]


def test_match_within_flap_window_reopens_and_marks_flapping(database, record):
    first = record(0, resolve_after_s=60)
    t = 0.0
    notifications = []
    for flap in range(1, 4):
        t += 60
        with database.session() as session:
            assert [v.id for v in lifecycle.auto_resolve_due(session, later(t), {})] == [first.id]
        t += 30
        again = record(t, resolve_after_s=60)
        notifications.append(again.notify)
        assert (again.id, again.status, again.flaps) == (first.id, "open", flap)
        assert again.flapping is (flap == 3)
    assert notifications == ["trigger", "trigger", "trigger"]
    entry = history(database, first.id)[-1]
    assert (entry.action, entry.status_before, entry.status_after) == ("reopened", "resolved", "open")
    assert entry.detail["flaps"] == 3 and entry.detail["flapping"] is True
    # Flapping: the short resolve.after no longer resolves it; the flap window (600 s) must pass quietly.
    with database.session() as session:
        assert lifecycle.auto_resolve_due(session, later(t + 61), {}) == []
    with database.session() as session:
        done = lifecycle.auto_resolve_due(session, later(t + 600), {})
    assert [(v.id, v.flapping) for v in done] == [(first.id, False)]


def test_reopen_of_a_flapping_violation_is_damped(database, record):
    first = record(0)
    for n in range(3):
        act(database, "resolve", first.id, n * 10 + 1)
        again = record(n * 10 + 5)
    assert again.flapping and again.notify == "trigger"  # the reopen that made it flap still pages
    act(database, "resolve", first.id, 40)
    damped = record(45)
    assert (damped.id, damped.flaps, damped.notify) == (first.id, 4, None)


def test_match_after_the_flap_window_opens_a_new_violation(database, record):
    first = record(0, flap_window_s=60)
    act(database, "resolve", first.id, 10)
    second = record(71, flap_window_s=60)
    assert second.id != first.id and (second.flaps, second.notify) == (0, "trigger")


def test_repeat_interval_decides_repeat_notifications(database, record):
    first = record(0, repeat_interval_s=3600)
    assert first.notify == "trigger" and first.last_notified_at == NOW
    assert record(1800, repeat_interval_s=3600).notify is None
    repeat = record(3600, repeat_interval_s=3600)
    assert (repeat.notify, repeat.last_notified_at) == ("repeat", later(3600))
    assert record(5000, repeat_interval_s=3600).notify is None
    act(database, "acknowledge", first.id, 5100)
    assert record(9000, repeat_interval_s=3600).notify is None  # acknowledged: someone is on it
