"""record_matches (one engine batch) leaves the database exactly as record_match called per match would."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event as sqlalchemy_event
from sqlalchemy import select

from gpuslo.engine.store import Database, lifecycle
from gpuslo.engine.store.batch import record_matches
from gpuslo.engine.store.models import EvidenceRow, HistoryRow, ViolationRow
from gpuslo.engine.store.repository import record_match, store_events
from gpuslo.engine.store.rows import violation_fields
from gpuslo.engine.violations import Match

NOW = datetime(2025, 1, 2, tzinfo=UTC)


def _scenario(make_event: Callable[..., Any], make_match: Callable[..., Match]) -> tuple[list[Any], list[Any]]:
    """Events, and rounds of (now, matches, lifecycle actions before the round) covering every path."""
    events = [make_event(id=f"e{i:03d}", host=f"node-{i % 3}", gpu=i % 2) for i in range(320)]

    def match(pair: str, picked: Sequence[int], **extra: Any) -> Match:
        return make_match([events[i] for i in picked], rule_id=f"rule-{pair}", group_key=f"g={pair}", **extra)

    rounds = [
        (NOW, [], [match("a", [0, 1]), match("b", [2]), match("a", [1, 3]), match("c", [4, 5]),
                   match("r", [6], repeat_interval_s=0.0), match("r", [6, 7], repeat_interval_s=0.0),
                   match("a", [3])]),
        (NOW + timedelta(seconds=60), [("resolve", "a"), ("acknowledge", "b")],
         [match("a", [8]), match("b", [9, 2]), match("d", [10]), match("c", list(range(20, 150))),
          match("a", [8, 11]), match("c", list(range(100, 260))), match("r", [12], repeat_interval_s=0.0)]),
        (NOW + timedelta(seconds=120), [("resolve", "c")], []),
        (NOW + timedelta(days=1), [("resolve", "d")],
         [match("c", [300, 301]), match("a", [302]), match("d", [303]), match("c", [301, 304]),
          match("e", list(range(260, 300)))]),
    ]
    return events, rounds


def _run(database: Database, events: list[Any], rounds: list[Any], batched: bool) -> list[Any]:
    with database.session() as session:
        store_events(session, events)
    views = []
    for now, actions, matches in rounds:
        with database.session() as session:
            for action, pair in actions:
                row = session.scalars(select(ViolationRow).where(ViolationRow.rule_id == f"rule-{pair}",
                                                                 ViolationRow.status != "resolved")).one()
                getattr(lifecycle, action)(session, row.id, actor="alice", now=now - timedelta(seconds=30))
            if batched:
                views += record_matches(session, matches, now=now)
            else:
                views += [record_match(session, m, now=now) for m in matches]
    return views


def _snapshot(database: Database, views: list[Any]) -> dict[str, Any]:
    """Everything stored and returned, with database ids replaced by (rule, group key, created_at)."""
    with database.session(readonly=True) as session:
        rows = list(session.scalars(select(ViolationRow)))
        key = {row.id: (row.rule_id, row.group_key, row.created_at) for row in rows}
        evidence = sorted((key[e.violation_id], e.position, e.event_id, e.added_at)
                          for e in session.scalars(select(EvidenceRow)))
        history = [(key[h.violation_id], h.at, h.action, h.actor, h.detail, h.status_before, h.status_after)
                   for h in session.scalars(select(HistoryRow).order_by(HistoryRow.id))]
        violations = {key[row.id]: {**violation_fields(row), "id": None} for row in rows}
    returned = [{**view.__dict__, "id": key[view.id]} for view in views]
    return {"violations": violations, "evidence": evidence, "returned": returned,
            "history": sorted(history, key=lambda h: (str(h[0]), h[1]))}


def test_batch_equals_one_match_at_a_time(database: Database, tmp_path: Path, make_event, make_match) -> None:
    events, rounds = _scenario(make_event, make_match)
    batched = _snapshot(database, _run(database, events, rounds, batched=True))
    reference = Database(f"sqlite:///{tmp_path / 'reference.db'}")
    reference.upgrade()
    try:
        expected = _snapshot(reference, _run(reference, events, rounds, batched=False))
    finally:
        reference.dispose()
    assert batched == expected
    notified = [(view["rule_id"], view["notify"]) for view in batched["returned"]]
    assert ("rule-a", "trigger") in notified[7:]  # round 2 reopened the resolved one
    assert ("rule-r", "repeat") in notified  # repeat_interval 0: every fold notifies again
    assert len({k for k in batched["violations"] if k[0] == "rule-c"}) == 2  # resolved a day ago: a new one
    assert len({k for k in batched["violations"] if k[0] == "rule-d"}) == 1  # resolved 30 s ago: reopened
    assert any(len(h[4].get("evidence", [])) > 100 for h in batched["history"])  # the evidence cap was hit


def test_empty_batch_records_nothing(database: Database) -> None:
    with database.session() as session:
        assert record_matches(session, [], now=NOW) == []


def test_a_batch_takes_a_fixed_number_of_statements(database: Database, make_event, make_match) -> None:
    events = [make_event(id=f"s{i:03d}") for i in range(60)]
    with database.session() as session:
        store_events(session, events)
    first = [make_match([e], rule_id="r", group_key=f"g{i % 20}") for i, e in enumerate(events[:30])]
    again = [make_match([e], rule_id="r", group_key=f"g{i % 20}") for i, e in enumerate(events[30:])]
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    sqlalchemy_event.listen(database.engine, "before_cursor_execute", count)
    try:
        for matches in (first, again):  # 20 new violations folding 10 repeats, then 30 folds
            statements.clear()
            with database.session() as session:
                views = record_matches(session, matches, now=NOW)
            assert len(views) == 30
            assert len(statements) <= 12, "|".join(s[:50].replace("\n", " ") for s in statements)
    finally:
        sqlalchemy_event.remove(database.engine, "before_cursor_execute", count)
    assert sorted(v.occurrences for v in views)[-1] == 4  # g0..g9: two matches in each batch
