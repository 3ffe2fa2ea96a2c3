"""The engine's write path (store.violations.record) folds a batch in memory exactly as one call per item would.

A batch of matches is compared with record_match called per match (each reads what the one before wrote), and a
batch of clears with one call per clear: everything stored and everything returned.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event as sqlalchemy_event
from sqlalchemy import select

from gpuslo.engine.errors import StoreError
from gpuslo.engine.events import Event
from gpuslo.engine.store import Database, lifecycle
from gpuslo.engine.store.models import EVIDENCE_KEEP_FIRST, EVIDENCE_LIMIT, EvidenceRow, HistoryRow, ViolationRow
from gpuslo.engine.store.repository import store_events
from gpuslo.engine.store.rows import violation_fields
from gpuslo.engine.store.violations import record, record_match
from gpuslo.engine.violations import Clear, Match

NOW = datetime(2025, 1, 2, tzinfo=UTC)


def record_matches(session: Any, matches: Sequence[Match], *, now: datetime,
                   notifying_only: bool = False) -> list[Any]:
    """One engine batch of matches; the views it returns."""
    return [change.view for change in record(session, matches, now=now, notifying_only=notifying_only)]


def resolve_cleared(session: Any, clears: Sequence[Clear], now: datetime) -> list[Any]:
    """One engine batch of clears; the views of the violations they resolved."""
    return [change.view for change in record(session, clears, now=now)]


@dataclass
class Round:
    """One transaction: human actions (action, pair) at `now` - 30 s, then the matches, then the clears."""

    now: datetime
    matches: list[Match] = field(default_factory=list)
    actions: list[tuple[str, str]] = field(default_factory=list)
    clears: list[Clear] = field(default_factory=list)


def _scenario(make_event: Callable[..., Any], make_match: Callable[..., Match]) -> tuple[list[Any], list[Round]]:
    """Events, and rounds covering every path of a fold."""
    events = [make_event(id=f"e{i:03d}", host=f"node-{i % 3}", gpu=i % 2) for i in range(320)]

    def match(pair: str, picked: Sequence[int], **extra: Any) -> Match:
        return make_match([events[i] for i in picked], rule_id=f"rule-{pair}", group_key=f"g={pair}", **extra)

    rounds = [
        Round(NOW, [match("a", [0, 1]), match("b", [2]), match("a", [1, 3]), match("c", [4, 5]),
                    match("r", [6], repeat_interval_s=0.0), match("r", [6, 7], repeat_interval_s=0.0),
                    match("a", [3])]),
        Round(NOW + timedelta(seconds=60),
              [match("a", [8]), match("b", [9, 2]), match("d", [10]), match("c", list(range(20, 150))),
               match("a", [8, 11]), match("c", list(range(100, 260))), match("r", [12], repeat_interval_s=0.0)],
              [("resolve", "a"), ("acknowledge", "b")]),
        Round(NOW + timedelta(seconds=120), actions=[("resolve", "c")]),
        Round(NOW + timedelta(days=1),
              [match("c", [300, 301]), match("a", [302]), match("d", [303]), match("c", [301, 304]),
               match("e", list(range(260, 300)))], [("resolve", "d")]),
        # A match seen before the violation's first_seen widens the span backwards.
        Round(NOW + timedelta(days=1, seconds=5),
              [match("e", [305], seen_at=events[0].time - timedelta(hours=1)), match("e", [306, 306, 305])]),
    ]
    return events, rounds


def _run(database: Database, events: list[Any], rounds: list[Round], batched: bool) -> list[Any]:
    """Store the events, play the rounds; every view returned, in order."""
    with database.session() as session:
        store_events(session, events)
    views = []
    for round_ in rounds:
        with database.session() as session:
            for action, pair in round_.actions:
                row = session.scalars(select(ViolationRow).where(ViolationRow.rule_id == f"rule-{pair}",
                                                                 ViolationRow.status != "resolved")).one()
                getattr(lifecycle, action)(session, row.id, actor="alice", now=round_.now - timedelta(seconds=30))
            if batched:
                views += record_matches(session, round_.matches, now=round_.now)
                views += resolve_cleared(session, round_.clears, round_.now)
            else:
                views += [record_match(session, m, now=round_.now) for m in round_.matches]
                for clear in round_.clears:
                    views += resolve_cleared(session, [clear], round_.now)
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


def _compare(database: Database, tmp_path: Path, events: list[Any], rounds: list[Round]) -> dict[str, Any]:
    """The batched run on `database` equals the one-at-a-time run on a fresh SQLite file; the batched snapshot."""
    batched = _snapshot(database, _run(database, events, rounds, batched=True))
    reference = Database(f"sqlite:///{tmp_path / 'reference.db'}")
    reference.upgrade()
    try:
        expected = _snapshot(reference, _run(reference, events, rounds, batched=False))
    finally:
        reference.dispose()
    assert batched == expected
    return batched


def test_batch_equals_one_match_at_a_time(database: Database, tmp_path: Path, make_event, make_match) -> None:
    events, rounds = _scenario(make_event, make_match)
    batched = _compare(database, tmp_path, events, rounds)
    notified = [(view["rule_id"], view["notify"]) for view in batched["returned"]]
    assert ("rule-a", "trigger") in notified[7:]  # round 2 reopened the resolved one
    assert ("rule-r", "repeat") in notified  # repeat_interval 0: every fold notifies again
    assert len({k for k in batched["violations"] if k[0] == "rule-c"}) == 2  # resolved a day ago: a new one
    assert len({k for k in batched["violations"] if k[0] == "rule-d"}) == 1  # resolved 30 s ago: reopened
    assert any(len(h[4].get("evidence", [])) > 100 for h in batched["history"])  # the evidence cap was hit
    (rule_e,) = [v for k, v in batched["violations"].items() if k[0] == "rule-e"]
    assert rule_e["first_seen"] == events[0].time - timedelta(hours=1)


def test_a_trimmed_event_is_linked_again_as_one_match_at_a_time_would(database: Database, tmp_path: Path,
                                                                      make_event, make_match) -> None:
    """A trim in the middle of a batch drops links; a later match of the batch (or the next) links them again."""
    events = [make_event(id=f"t{i:03d}") for i in range(EVIDENCE_LIMIT + 40)]
    past_cap = EVIDENCE_LIMIT + 10  # the first trim drops the links at positions 21..30

    def match(picked: Sequence[int]) -> Match:
        return make_match([events[i] for i in picked], rule_id="rule-t", group_key="g=t")

    rounds = [
        Round(NOW, [match(range(0, 150)), match(range(150, past_cap)), match([25, past_cap, 5])]),
        Round(NOW + timedelta(seconds=10), [match([26, 27, past_cap + 1, 3])]),
        Round(NOW + timedelta(seconds=20), [match(range(past_cap + 2, past_cap + 30)), match([28, 2])]),
    ]
    batched = _compare(database, tmp_path, events, rounds)
    again = {"t025", "t026", "t027", "t028"}
    linked_again = [set(h[4]["evidence"]) & again for h in batched["history"][1:]]  # after the creation
    assert [found for found in linked_again if found] == [{"t025"}, {"t026", "t027"}, {"t028"}]
    assert len(batched["evidence"]) == EVIDENCE_LIMIT
    assert [e[2] for e in batched["evidence"][:EVIDENCE_KEEP_FIRST]] == [f"t{i:03d}" for i in range(20)]


def test_violations_kept_at_the_evidence_cap_trim_as_one_match_at_a_time_would(database: Database, tmp_path: Path,
                                                                              make_event, make_match) -> None:
    """The steady state of a busy violation: at EVIDENCE_LIMIT rows, every batch trims (the batch reads only
    the positions a trim can reach); batches of 1-12 matches of 1-3 new or re-seen events, on two violations."""
    rng = random.Random(7)
    events = [make_event(id=f"s{i:04d}") for i in range(EVIDENCE_LIMIT + 400)]
    seen = 0
    rounds = [Round(NOW, [make_match(events[:EVIDENCE_LIMIT], rule_id="rule-s", group_key=f"g={g}")
                          for g in ("a", "b")])]
    for step in range(1, 25):
        batch = []
        for _ in range(rng.randint(1, 12)):
            fresh = [events[EVIDENCE_LIMIT + seen + i] for i in range(rng.randint(0, 2))]
            seen += len(fresh)
            again = [events[rng.randrange(EVIDENCE_LIMIT + seen)]]  # an old one: linked, trimmed or kept first
            batch.append(make_match(fresh + again, rule_id="rule-s", group_key=f"g={rng.choice('ab')}"))
        rounds.append(Round(NOW + timedelta(seconds=step), batch))
    batched = _compare(database, tmp_path, events, rounds)
    assert len(batched["evidence"]) == 2 * EVIDENCE_LIMIT


def _clear(rule: str, group: str, at: datetime, event_id: str, rulebook: str = "memory") -> Clear:
    return Clear(rule, rulebook, group, Event(id=event_id, kind="mem_fragmentation", time=at, host="node-a"))


def test_clears_resolve_as_one_clear_at_a_time_would(database: Database, tmp_path: Path, make_event,
                                                     make_match) -> None:
    events = [make_event(id=f"c{i:02d}") for i in range(12)]
    seen = {name: events[index].time for name, index in (("a", 0), ("b", 1), ("c", 2), ("f", 3), ("x", 4))}

    def match(pair: str, index: int) -> Match:
        return make_match([events[index]], rule_id=f"rule-{pair}", group_key=f"g={pair}")

    def clear(pair: str, seconds: float, event_id: str, **extra: Any) -> Clear:
        return _clear(f"rule-{pair}", f"g={pair}", seen[pair] + timedelta(seconds=seconds), event_id, **extra)

    rounds = [
        Round(NOW, [match("a", 0), match("b", 1), match("c", 2), match("f", 3), match("x", 4)]),
        Round(NOW + timedelta(seconds=60), [match("f", 9)], clears=[
            clear("a", -1, "older"), clear("a", 1, "newer"), clear("a", 2, "after-resolved"),  # the newer one
            clear("b", 1, "first"), clear("b", 2, "second"),  # the first that qualifies is the one recorded
            clear("c", -5, "too-old"),  # older than the last match: c stays open
            clear("f", 1, "before-the-fold"),  # f folded a later match in this very batch: stays open
            clear("x", 1, "other-rulebook", rulebook="latency"),  # same rule and group, another rulebook
            _clear("rule-z", "g=z", NOW, "no-violation"),  # no violation of that rule at all
        ]),
        Round(NOW + timedelta(seconds=90), [match("a", 10)], [("acknowledge", "c")],
              [clear("c", 1, "acknowledged-one"), clear("b", 5, "already-resolved")]),  # a reopens (flap)
    ]
    batched = _compare(database, tmp_path, events, rounds)
    resolved = {h[0][0]: h[4]["event_id"] for h in batched["history"] if h[2] == "resolved"}
    assert resolved == {"rule-a": "newer", "rule-b": "first", "rule-c": "acknowledged-one"}
    states = {k[0]: v["status"] for k, v in batched["violations"].items()}
    assert states == {"rule-a": "open", "rule-b": "resolved", "rule-c": "resolved", "rule-f": "open",
                      "rule-x": "open"}
    assert [v["notify"] for v in batched["returned"] if v["status"] == "resolved"] == ["resolve"] * 3


def test_matches_and_clears_interleaved_in_one_batch_equal_one_item_at_a_time(database: Database, tmp_path: Path,
                                                                             make_event, make_match) -> None:
    """A clear between matches of its group resolves the violation (new in this batch, or stored) and the next
    match reopens it, counting flaps, exactly as one call per item does."""
    events = [make_event(id=f"i{i:02d}") for i in range(8)]

    def match(pair: str, index: int) -> Match:
        return make_match([events[index]], rule_id=f"rule-{pair}", group_key=f"g={pair}")

    def clear(pair: str, name: str) -> Clear:
        return _clear(f"rule-{pair}", f"g={pair}", NOW, name)

    stored_first = [match("s", 0)]
    items: list[Match | Clear] = [match("a", 1), clear("a", "a1"), match("a", 2), clear("s", "s1"), match("b", 3),
                                  clear("a", "a2"), match("a", 4), clear("b", "b1"), match("s", 5), clear("a", "a3")]

    def run(target: Database, batched: bool) -> dict[str, Any]:
        with target.session() as session:
            store_events(session, events)
            record(session, stored_first, now=NOW - timedelta(seconds=10))
        with target.session() as session:
            if batched:
                views = [change.view for change in record(session, items, now=NOW)]
            else:
                views = [change.view for item in items for change in record(session, [item], now=NOW)]
        return _snapshot(target, views)

    batched = run(database, batched=True)
    reference = Database(f"sqlite:///{tmp_path / 'reference.db'}")
    reference.upgrade()
    try:
        expected = run(reference, batched=False)
        for got, want in zip(batched["returned"], expected["returned"], strict=True):
            assert {k: v for k, v in got.items() if v != want[k]} == {}, (got["rule_id"], got["status"])
        assert batched == expected
    finally:
        reference.dispose()
    states = {k[0]: (v["status"], v["occurrences"], v["flaps"]) for k, v in batched["violations"].items()}
    assert states == {"rule-a": ("resolved", 3, 2), "rule-b": ("resolved", 1, 0), "rule-s": ("open", 2, 1)}
    actions = [h[2] for h in batched["history"] if h[0][0] == "rule-a"]
    assert actions == ["created", "resolved", "reopened", "resolved", "reopened", "resolved"]


def test_notifying_only_returns_the_views_that_notify(database: Database, make_event, make_match) -> None:
    events = [make_event() for _ in range(8)]
    with database.session() as session:
        store_events(session, events)
    # The fold of match 4 sets g0's repeat interval to 0: the next fold into g0 (match 6) repeats.
    matches = [make_match([events[i]], group_key=f"g{i % 2}", repeat_interval_s=0.0 if i == 4 else 3600.0)
               for i in range(8)]
    with database.session() as session:
        first = record_matches(session, matches[:2], now=NOW)
        rest = record_matches(session, matches[2:], now=NOW + timedelta(seconds=1), notifying_only=True)
    assert [(v.group_key, v.notify, v.occurrences) for v in first] == [("g0", "trigger", 1), ("g1", "trigger", 1)]
    assert [(v.group_key, v.notify, v.occurrences) for v in rest] == [("g0", "repeat", 4)]


def test_empty_batch_records_nothing(database: Database) -> None:
    with database.session() as session:
        assert record_matches(session, [], now=NOW) == []
        assert resolve_cleared(session, [], NOW) == []


def test_unstored_evidence_is_refused_before_anything_is_written(database: Database, make_event,
                                                                 make_match) -> None:
    stored, ghost = make_event(id="stored"), make_event(id="ghost")
    with database.session() as session:
        store_events(session, [stored])
    try:
        with database.session() as session:
            record_matches(session, [make_match([stored], group_key="ok"), make_match([stored, ghost])], now=NOW)
    except StoreError as exc:
        assert "evidence events not stored: ghost" in str(exc)
    else:
        raise AssertionError("a match whose evidence is not stored was recorded")
    with database.session(readonly=True) as session:
        assert session.scalars(select(ViolationRow.id)).all() == []


@contextmanager
def _statements(database: Database) -> Iterator[list[str]]:
    """The SQL statements sent to the database meanwhile."""
    sent: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    sqlalchemy_event.listen(database.engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        sqlalchemy_event.remove(database.engine, "before_cursor_execute", count)


def test_a_batch_takes_a_fixed_number_of_statements(database: Database, make_event, make_match) -> None:
    events = [make_event(id=f"s{i:03d}") for i in range(60)]
    with database.session() as session:
        store_events(session, events)
    first = [make_match([e], rule_id="r", group_key=f"g{i % 20}") for i, e in enumerate(events[:30])]
    again = [make_match([e], rule_id="r", group_key=f"g{i % 20}") for i, e in enumerate(events[30:])]
    for matches in (first, again):  # 20 new violations folding 10 repeats, then 30 folds
        with _statements(database) as sent, database.session() as session:
            views = record_matches(session, matches, now=NOW)
        assert len(views) == 30
        assert len(sent) <= 10, "|".join(s[:50].replace("\n", " ") for s in sent)
    assert sorted(v.occurrences for v in views)[-1] == 4  # g0..g9: two matches in each batch


def test_clears_take_one_query_when_none_resolves(database: Database, make_event, make_match) -> None:
    events = [make_event() for _ in range(3)]
    with database.session() as session:
        store_events(session, events)
        record_matches(session, [make_match([e], group_key=f"g{i}") for i, e in enumerate(events)], now=NOW)
    clears = [_clear("oom-storm", f"g{i % 150}", NOW - timedelta(days=1), f"x{i}") for i in range(300)]
    with _statements(database) as sent, database.session() as session:
        assert resolve_cleared(session, clears, NOW) == []
    assert sum(1 for s in sent if "FROM violations" in s) == 1


def test_a_pair_a_concurrent_writer_opened_first_folds_into_its_violation(database: Database, make_event,
                                                                          make_match) -> None:
    if database.dialect != "postgresql":
        return  # SQLite serializes writers with BEGIN IMMEDIATE; the race exists only on PostgreSQL
    raced, other = make_event(), make_event()
    with database.session() as session:
        store_events(session, [raced, other])
    result: list[Any] = []

    def batch() -> None:
        with database.session() as session:
            result.extend(record_matches(session, [make_match([other], group_key="calm"), make_match([raced])],
                                         now=NOW))

    with database.session() as first:
        created = record_match(first, make_match([raced]), now=NOW)
        thread = threading.Thread(target=batch)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the batch should wait on the unique index"
    thread.join(10)
    assert [(v.group_key, v.occurrences, v.notify) for v in result] == [("calm", 1, "trigger"),
                                                                        (created.group_key, 2, None)]
    assert result[1].id == created.id


def test_the_write_path_searches_indexes_on_sqlite_never_scans_a_table(database: Database, make_event,
                                                                       make_match) -> None:
    """Every statement of a batch that folds, links and trims: SQLite's plan searches an index. A row-value
    IN list alone made it scan the whole violations table once per engine batch."""
    if database.dialect != "sqlite":
        return  # PostgreSQL plans by table statistics; the scan that was fixed is SQLite's
    events = [make_event(id=f"p{i:03d}") for i in range(EVIDENCE_LIMIT + 20)]
    with database.session() as session:
        store_events(session, events)
        record_matches(session, [make_match(events[:EVIDENCE_LIMIT], rule_id="r", group_key=f"g={g}")
                                 for g in range(3)], now=NOW)
    plans: list[str] = []

    def explain(conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and not executemany:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
            plans.extend(f"{row[3]}  <- {statement.split('FROM', 1)[1][:60]!r}" for row in rows)

    sqlalchemy_event.listen(database.engine, "before_cursor_execute", explain)
    try:
        with database.session() as session:
            record_matches(session, [make_match(events[EVIDENCE_LIMIT + i:EVIDENCE_LIMIT + i + 2], rule_id="r",
                                                group_key=f"g={i % 3}") for i in range(0, 10, 2)], now=NOW)
    finally:
        sqlalchemy_event.remove(database.engine, "before_cursor_execute", explain)
    assert any("violations" in p for p in plans) and any("evidence" in p for p in plans)
    skipped = ("SCAN CONSTANT", "SCAN (subquery", "SCAN anon_")  # literal lists and subquery results, no tables
    scans = [p for p in plans if p.startswith("SCAN ") and not p.startswith(skipped) and "CONSTANT ROWS" not in p]
    assert scans == [], plans


def test_vouched_evidence_skips_the_check_and_the_foreign_key_still_refuses_a_ghost(
        database: Database, make_event, make_match) -> None:
    """`evidence_stored=True` (the embedded engine's write) sends no SELECT of the evidence ids; evidence that
    is not stored after all is refused by the evidence table's foreign key, and the transaction leaves nothing."""
    stored, ghost = make_event(id="stored"), make_event(id="ghost")
    with database.session() as session:
        store_events(session, [stored])
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    sqlalchemy_event.listen(database.engine, "before_cursor_execute", seen)
    try:
        with database.session() as session:
            record(session, [make_match([stored], group_key="ok")], now=NOW, evidence_stored=True)
        assert not any(s.lstrip().upper().startswith("SELECT EVENTS.ID") or "FROM events" in s for s in statements)
        try:
            with database.session() as session:
                record(session, [make_match([stored, ghost], group_key="bad")], now=NOW, evidence_stored=True)
        except StoreError as exc:
            assert "FOREIGN KEY" in str(exc).upper() or "foreign key" in str(exc).lower()
        else:
            raise AssertionError("evidence that is not stored was linked")
    finally:
        sqlalchemy_event.remove(database.engine, "before_cursor_execute", seen)
    with database.session(readonly=True) as session:
        assert session.scalars(select(ViolationRow.group_key)).all() == ["ok"]


def test_the_lowest_positions_are_each_violations_first_n_in_order(database: Database, make_event,
                                                                   make_match) -> None:
    """evidence._lowest_positions (one LIMIT per violation, UNION ALL) reads, for each violation, exactly its
    `upto` lowest positions: checked against a plain ordered read, with gaps left by deleted links."""
    from sqlalchemy import delete

    from gpuslo.engine.store import evidence

    events = [make_event(id=f"p{i:03d}") for i in range(60)]
    with database.session() as session:
        store_events(session, events)
        for n in range(3):
            record(session, [make_match(events[n * 10:n * 10 + 10 + 15 * n], rule_id=f"rule-p{n}",
                                        group_key=f"g={n}")], now=NOW)
        ids = sorted(session.scalars(select(ViolationRow.id)).all())
        session.execute(delete(EvidenceRow).where(EvidenceRow.violation_id == ids[1],
                                                  EvidenceRow.position.in_([2, 3, 7])))
        upto = {ids[0]: 4, ids[1]: 9, ids[2]: 100}
        parameters = {f"{name}{i}": value for i, v in enumerate(ids) for name, value in (("id", v), ("upto", upto[v]))}
        read: dict[int, list[int]] = {v: [] for v in ids}
        for violation_id, position in session.execute(evidence._lowest_positions(len(ids)), parameters):  # noqa: SLF001
            read[violation_id].append(position)
        expected = {v: list(session.scalars(select(EvidenceRow.position).where(EvidenceRow.violation_id == v)
                                            .order_by(EvidenceRow.position).limit(upto[v]))) for v in ids}
    assert {v: sorted(p) for v, p in read.items()} == expected
    assert [len(p) for p in expected.values()] == [4, 9, 40]
    assert expected[ids[1]][:3] == [1, 4, 5]
