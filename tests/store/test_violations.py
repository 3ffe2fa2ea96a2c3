"""Matches folding into violations, evidence, history, listing and counting."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store import Database, ViolationFilter
from gpuslo.engine.store.models import EVIDENCE_KEEP_FIRST, EVIDENCE_LIMIT
from gpuslo.engine.store.repository import (
    count_violations_by_rule,
    get_violation,
    list_violations,
    store_events,
)
from gpuslo.engine.store.violations import record_match
from gpuslo.engine.violations import STATUSES

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NOW = datetime(2025, 1, 2, tzinfo=UTC)


def _store(database: Database, *events) -> None:
    with database.session() as session:
        store_events(session, list(events))


def _record(database: Database, match, now: datetime = NOW):
    with database.session() as session:
        return record_match(session, match, now=now)


def _set_status(database: Database, violation_id: int, status: str) -> None:
    """Stands in for the acknowledge/resolve service, which is not part of the store yet."""
    with database.session() as session:
        session.execute(text("UPDATE violations SET status = :status WHERE id = :id"),
                        {"status": status, "id": violation_id})


def _resolve(database: Database, violation_id: int) -> None:
    _set_status(database, violation_id, "resolved")


def test_first_match_opens_a_violation(database: Database, make_event, make_match) -> None:
    events = [make_event(), make_event()]
    _store(database, *events)
    match = make_match(events)
    view = _record(database, match)
    assert (view.status, view.occurrences) == ("open", 1)
    assert view.first_seen == view.last_seen == match.seen_at
    assert (view.rule_id, view.group_key) == ("oom-storm", "host=node-a,gpu=0")
    assert (view.host, view.gpu) == ("node-a", 0)
    assert view.explanation == match.explanation.to_dict()
    assert dict(view.group) == {"host": "node-a", "gpu": 0} and dict(view.labels) == {"team": "serving"}
    assert view.created_at == view.updated_at == NOW
    with database.session(readonly=True) as session:
        detail = get_violation(session, view.id)
    assert detail is not None
    assert detail.evidence == tuple(events)
    assert [(h.action, h.actor) for h in detail.history] == [("created", "engine")]
    assert detail.history[0].detail["evidence"] == [e.id for e in events]
    assert detail.to_dict()["first_seen"] == "2025-01-01T00:00:02.000000Z"


def test_second_match_folds(database: Database, make_event, make_match) -> None:
    e1, e2, e3 = (make_event(id=f"e{i}", time=T0 + timedelta(minutes=i)) for i in (1, 2, 3))
    _store(database, e1, e2, e3)
    first = _record(database, make_match([e2, e3], seen_at=T0 + timedelta(minutes=3)))
    later = make_match([e1, e3], seen_at=T0 + timedelta(minutes=1), summary="newer text",
                       rulebook_version="2", rulebook_hash="b" * 64)
    folded = _record(database, later, now=NOW + timedelta(hours=1))
    assert folded.id == first.id and folded.occurrences == 2
    assert folded.first_seen == T0 + timedelta(minutes=1) and folded.last_seen == T0 + timedelta(minutes=3)
    assert (folded.summary, folded.rulebook_version, folded.rulebook_hash) == ("newer text", "2", "b" * 64)
    assert folded.explanation["evidence"] == ["e1", "e3"]
    assert folded.created_at == NOW and folded.updated_at == NOW + timedelta(hours=1)
    with database.session(readonly=True) as session:
        detail = get_violation(session, first.id)
        page = list_violations(session, ViolationFilter())
    assert detail is not None and [e.id for e in detail.evidence] == ["e1", "e2", "e3"]
    assert [h.action for h in detail.history] == ["created", "folded"]
    assert detail.history[1].detail["evidence"] == ["e1"] and detail.history[1].detail["occurrences"] == 2
    assert page.total == 1


def test_acknowledged_violation_still_folds(database: Database, make_event, make_match) -> None:
    event = make_event()
    _store(database, event)
    view = _record(database, make_match([event]))
    _set_status(database, view.id, "acknowledged")
    folded = _record(database, make_match([event]))
    assert (folded.id, folded.status, folded.occurrences) == (view.id, "acknowledged", 2)


def test_resolved_violation_is_not_folded_into(database: Database, make_event, make_match) -> None:
    event = make_event()
    _store(database, event)
    old = _record(database, make_match([event]))
    _resolve(database, old.id)
    new = _record(database, make_match([event]))
    assert new.id != old.id and new.occurrences == 1 and new.status == "open"
    with database.session(readonly=True) as session:
        assert list_violations(session, ViolationFilter()).total == 2
        assert count_violations_by_rule(session) == {"oom-storm": 1}


def test_other_group_key_is_another_violation(database: Database, make_event, make_match) -> None:
    a, b = make_event(), make_event(host="node-b")
    _store(database, a, b)
    assert _record(database, make_match([a])).id != _record(database, make_match([b])).id


def test_host_and_gpu_fall_back_to_the_latest_evidence(database: Database, make_event, make_match) -> None:
    early, late = make_event(host="node-x", gpu=1), make_event(host="node-y", gpu=5)
    _store(database, early, late)
    view = _record(database, make_match([late, early], group={"job": "train-7"}, group_key="job=train-7"))
    assert (view.host, view.gpu) == ("node-y", 5)


def test_unstored_evidence_is_refused(database: Database, make_event, make_match) -> None:
    stored, ghost = make_event(id="stored"), make_event(id="ghost")
    _store(database, stored)
    with pytest.raises(StoreError, match="evidence events not stored: ghost"):
        _record(database, make_match([stored, ghost]))
    with database.session(readonly=True) as session:
        assert list_violations(session, ViolationFilter()).total == 0


def test_naive_seen_at_is_refused(database: Database, make_event, make_match) -> None:
    event = make_event()
    _store(database, event)
    with pytest.raises(StoreError, match="naive datetime"):
        _record(database, make_match([event], seen_at=datetime(2025, 1, 1)))


def test_evidence_is_capped_keeping_the_first_and_the_latest(database: Database, make_event,
                                                             make_match) -> None:
    events = [make_event(id=f"e{i:03d}", time=T0 + timedelta(seconds=i)) for i in range(EVIDENCE_LIMIT + 30)]
    _store(database, *events)
    for start in range(0, len(events), 50):
        view = _record(database, make_match(events[start:start + 50]))
    with database.session(readonly=True) as session:
        detail = get_violation(session, view.id)
    assert detail is not None and len(detail.evidence) == EVIDENCE_LIMIT
    kept = [e.id for e in detail.evidence]
    latest = EVIDENCE_LIMIT - EVIDENCE_KEEP_FIRST
    assert kept == [e.id for e in events[:EVIDENCE_KEEP_FIRST] + events[-latest:]]


def test_concurrent_first_matches_make_one_violation(database: Database, make_event, make_match) -> None:
    if database.dialect != "postgresql":
        return  # SQLite serializes writers with BEGIN IMMEDIATE; the race exists only on PostgreSQL
    event = make_event()
    _store(database, event)
    result = []
    with database.session() as first:
        created = record_match(first, make_match([event]), now=NOW)
        thread = threading.Thread(target=lambda: result.append(_record(database, make_match([event]))))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the second writer should wait on the unique index"
    thread.join(10)
    assert result and result[0].id == created.id and result[0].occurrences == 2


def test_get_missing_violation_is_none(database: Database) -> None:
    with database.session(readonly=True) as session:
        assert get_violation(session, 12345) is None


def _seed_for_listing(database: Database, make_event, make_match) -> list[int]:
    """Five violations, last_seen T0+1m ... T0+5m; the third and fifth share a last_seen."""
    specs = [
        dict(host="n1", gpu=0, rule_id="r-a", severity="critical", slo="availability", minute=1),
        dict(host="n2", gpu=1, rule_id="r-b", severity="warning", slo="latency", minute=2),
        dict(host="n3", gpu=0, rule_id="r-a", severity="warning", slo="latency", minute=4),
        dict(host="n1", gpu=2, rule_id="r-c", severity="critical", slo="availability", minute=3),
        dict(host="n4", gpu=0, rule_id="r-a", severity="info", slo="latency", minute=4),
    ]
    ids = []
    for spec in specs:
        event = make_event(host=spec["host"], gpu=spec["gpu"])
        _store(database, event)
        seen = T0 + timedelta(minutes=spec["minute"])
        match = make_match([event], seen_at=seen, rule_id=spec["rule_id"], severity=spec["severity"],
                           slo=spec["slo"])
        ids.append(_record(database, match).id)
    return ids


def test_listing_is_newest_first_with_pages(database: Database, make_event, make_match) -> None:
    ids = _seed_for_listing(database, make_event, make_match)
    newest_first = [ids[4], ids[2], ids[3], ids[1], ids[0]]  # equal last_seen: higher id first
    with database.session(readonly=True) as session:
        pages = [list_violations(session, ViolationFilter(), page=n, page_size=2) for n in (1, 2, 3, 4)]
    expected = [newest_first[0:2], newest_first[2:4], newest_first[4:], []]
    assert [[v.id for v in p.items] for p in pages] == expected
    assert [p.has_next for p in pages] == [True, True, False, False]
    assert {p.total for p in pages} == {5}


@pytest.mark.parametrize(("filters", "positions"), [
    (ViolationFilter(status="open"), {0, 1, 2, 3}),
    (ViolationFilter(status="resolved"), {4}),
    (ViolationFilter(severity="critical"), {0, 3}),
    (ViolationFilter(slo="latency"), {1, 2, 4}),
    (ViolationFilter(rule_id="r-a"), {0, 2, 4}),
    (ViolationFilter(host="n1"), {0, 3}),
    (ViolationFilter(gpu=0), {0, 2, 4}),
    (ViolationFilter(since=T0 + timedelta(minutes=3)), {2, 3, 4}),
    (ViolationFilter(until=T0 + timedelta(minutes=2)), {0, 1}),
    (ViolationFilter(rule_id="r-a", status="open", since=T0 + timedelta(minutes=2)), {2}),
    (ViolationFilter(host="nobody"), set()),
])
def test_listing_filters(database: Database, make_event, make_match, filters: ViolationFilter,
                         positions: set[int]) -> None:
    ids = _seed_for_listing(database, make_event, make_match)
    _resolve(database, ids[4])
    with database.session(readonly=True) as session:
        page = list_violations(session, filters)
    assert {v.id for v in page.items} == {ids[p] for p in positions} and page.total == len(positions)


def test_count_by_rule_counts_unresolved(database: Database, make_event, make_match) -> None:
    ids = _seed_for_listing(database, make_event, make_match)
    _resolve(database, ids[0])
    _set_status(database, ids[2], "acknowledged")
    with database.session(readonly=True) as session:
        assert count_violations_by_rule(session) == {"r-a": 2, "r-b": 1, "r-c": 1}


def test_status_check_matches_the_contract() -> None:
    from gpuslo.engine.store.models import STATUS_CHECK

    assert STATUS_CHECK == "status IN (" + ", ".join(f"'{s}'" for s in STATUSES) + ")"
