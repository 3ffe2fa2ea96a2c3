"""Silences: create, match, list, expire by hand and by schedule, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuslo.engine.errors import InvalidSilence, InvalidTransition, NotFoundError
from gpuslo.engine.store import Database, silences
from gpuslo.engine.store.repository import store_events
from gpuslo.engine.store.violations import record_match

NOW = datetime(2025, 1, 2, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _create(database: Database, matchers, start=NOW, end=NOW + HOUR, **kwargs):
    kwargs.setdefault("author", "alice")
    kwargs.setdefault("comment", "maintenance on node-a")
    with database.session() as session:
        return silences.create_silence(session, matchers=matchers, starts_at=start, ends_at=end, now=NOW,
                                       **kwargs)


@pytest.fixture
def violation(database: Database, make_event, make_match):
    event = make_event()
    with database.session() as session:
        store_events(session, [event], now=NOW)
        return record_match(session, make_match([event]), now=NOW)


def test_active_silences_match_every_matcher(database, violation):
    hit = _create(database, {"host": "node-a", "gpu": 0, "labels.team": "serving"})
    _create(database, {"host": "node-a", "severity": "warning"})  # severity differs
    _create(database, {"rule_id": "oom-storm"}, start=NOW + HOUR, end=NOW + 2 * HOUR)  # not started
    assert dict(hit.matchers) == {"host": "node-a", "gpu": "0", "labels.team": "serving"}
    with database.session(readonly=True) as session:
        assert [s.id for s in silences.active_silences_for(session, violation, NOW)] == [hit.id]
        assert [s.id for s in silences.active_silences_for(session, violation, NOW + HOUR)] != [hit.id]


def test_expire_by_hand_then_again_is_refused(database, violation):
    silence = _create(database, {"rule_id": "oom-storm"})
    with database.session() as session:
        expired = silences.expire_silence(session, silence.id, actor="bob", now=NOW + timedelta(minutes=5))
    assert (expired.expired_by, expired.expired_at) == ("bob", NOW + timedelta(minutes=5))
    assert not expired.active_at(NOW + timedelta(minutes=6))
    with database.session(readonly=True) as session:
        assert silences.active_silences_for(session, violation, NOW + timedelta(minutes=6)) == []
    with database.session() as session, pytest.raises(InvalidTransition, match="already expired"):
        silences.expire_silence(session, silence.id, actor="bob", now=NOW)
    with database.session() as session, pytest.raises(NotFoundError):
        silences.expire_silence(session, 999, actor="bob", now=NOW)


def test_schedule_expires_ended_silences_and_listing_puts_live_ones_first(database):
    ended = _create(database, {"host": "node-a"}, end=NOW + timedelta(minutes=10))
    live = _create(database, {"host": "node-b"})
    with database.session() as session:
        assert silences.expire_ended_silences(session, NOW + timedelta(minutes=10)) == 1
    with database.session(readonly=True) as session:
        listed = silences.list_silences(session)
        assert [s.id for s in listed] == [live.id, ended.id]
        assert (listed[1].expired_by, listed[1].expired_at) == ("schedule", ended.ends_at)
        assert [s.id for s in silences.list_silences(session, include_expired=False)] == [live.id]


@pytest.mark.parametrize(("matchers", "kwargs", "message"), [
    ({}, {}, "at least one matcher"),
    ({"hostname": "x"}, {}, "unknown matcher 'hostname'"),
    ({"host": ""}, {}, "non-empty"),
    ({"host": "x"}, {"end": NOW - HOUR}, "must end after it starts"),
    ({"host": "x"}, {"comment": " "}, "author and a comment"),
])
def test_bad_silences_are_refused(database, matchers, kwargs, message):
    with pytest.raises(InvalidSilence, match=message):
        _create(database, matchers, **kwargs)


def test_silences_are_read_once_per_transaction_and_again_after_it_changes_them(database, violation):
    first = _create(database, {"host": "node-a"})
    with database.session(readonly=True) as session:
        assert [s.id for s in silences.active_silences_for(session, violation, NOW)] == [first.id]
        committed = _create(database, {"rule_id": violation.rule_id})  # another transaction, meanwhile
        assert [s.id for s in silences.active_silences_for(session, violation, NOW)] == [first.id]
    with database.session() as session:  # the next transaction sees it; its own changes count at once
        assert [s.id for s in silences.active_silences_for(session, violation, NOW)] == [first.id, committed.id]
        made = silences.create_silence(session, matchers={"host": "node-a"}, starts_at=NOW, ends_at=NOW + HOUR,
                                       author="bob", comment="more maintenance", now=NOW)
        silences.expire_silence(session, first.id, actor="bob", now=NOW)
        assert [s.id for s in silences.active_silences_for(session, violation, NOW)] == [committed.id, made.id]
        savepoint = session.begin_nested()
        undone = silences.create_silence(session, matchers={"host": "node-a"}, starts_at=NOW, ends_at=NOW + HOUR,
                                         author="bob", comment="undone", now=NOW)
        assert undone.id in [s.id for s in silences.active_silences_for(session, violation, NOW)]
        savepoint.rollback()
        assert [s.id for s in silences.active_silences_for(session, violation, NOW)] == [committed.id, made.id]
        assert silences.active_silences_for(session, violation, NOW + HOUR) == []  # ended: times checked per call
