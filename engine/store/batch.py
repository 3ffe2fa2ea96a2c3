"""The engine's write path: every match of one engine batch recorded with a few Core statements, no ORM rows.

The result is what `repository.record_match` gives when called once per match in order (tests compare the
two, evidence trimming included): one SELECT (FOR UPDATE on PostgreSQL) reads the columns a fold needs of the
pairs' unresolved violations and finds the recently resolved ones; new violations go in with one INSERT
RETURNING; matches fold in memory; evidence, history and the folded violations are written with one executemany
each. A pair whose match may reopen a violation resolved within its flap window takes the per-match path, which
decides that case exactly, and so do all new pairs when a concurrent writer opened one of them first.
The statements are built once, so SQLAlchemy finds their compiled form by a memoized cache key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuslo.engine.errors import StoreError
from gpuslo.engine.events import format_time
from gpuslo.engine.store import repository
from gpuslo.engine.store.lifecycle import fold_notification_of
from gpuslo.engine.store.models import (
    EVIDENCE_KEEP_FIRST,
    EVIDENCE_LIMIT,
    EvidenceRow,
    HistoryRow,
    ViolationRow,
)
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.store.rows import (
    chunks,
    columns_view,
    expire_violations,
    history_values,
    require_aware,
    store_operation,
)
from gpuslo.engine.violations import Match

Pair = tuple[str, str]
Columns = dict[str, Any]  # one violation's column values, keyed like ViolationView's fields
_CHUNK = 250  # pairs or ids per IN (...)
_KEEP_LATEST = EVIDENCE_LIMIT - EVIDENCE_KEEP_FIRST

_V, _E = ViolationRow.__table__.c, EvidenceRow.__table__.c
# What a fold reads; the other columns of a view (rule text, explanation, labels, place) come from the match.
_READ = ("id", "rule_id", "group_key", "group", "status", "first_seen", "last_seen", "occurrences", "created_at",
         "updated_at", "quiet_since", "last_notified_at", "acknowledged_at", "acknowledged_by", "resolved_at",
         "resolved_by", "flaps", "flapping", "repeat_interval_s", "flap_window_s", "resolve_after_s")
# What a fold writes: repository._fold_values and the notification mark.
_FOLDED = ("occurrences", "first_seen", "last_seen", *repository._LATEST_FIELDS, "explanation", "labels", "host",
           "gpu", "updated_at", "quiet_since", "last_notified_at")
_NOT_SET_ON_CREATE = {"acknowledged_at": None, "acknowledged_by": None, "resolved_at": None, "resolved_by": None}

# Unresolved violations of the pairs, and those resolved since `since` (a match may reopen them). The two
# plain IN lists are what lets SQLite search the (rule_id, group_key) index: for a row-value IN list alone it
# scanned the whole violations table (EXPLAIN QUERY PLAN; tests/store/test_batch.py checks the plan).
_CANDIDATES = (select(*(_V[name] for name in _READ))
               .where(_V.rule_id.in_(bindparam("rules", expanding=True)),
                      _V.group_key.in_(bindparam("keys", expanding=True)),
                      tuple_(_V.rule_id, _V.group_key).in_(bindparam("pairs", expanding=True)),
                      or_(_V.status != "resolved", _V.resolved_at >= bindparam("since")))
               .order_by(_V.id)
               .with_for_update())  # ignored by SQLite, where BEGIN IMMEDIATE already serializes writers
# Plain INSERT, not ON CONFLICT DO NOTHING: SQLAlchemy compiles a dialect's INSERT construct on every execution.
_CREATE = insert(ViolationRow.__table__).returning(_V.id, _V.rule_id, _V.group_key)
_EVIDENCE_STATS = (select(_E.violation_id, func.max(_E.position), func.count())
                   .where(_E.violation_id.in_(bindparam("ids", expanding=True))).group_by(_E.violation_id))
_LINKED = select(_E.violation_id, _E.event_id, _E.position).where(
    _E.violation_id.in_(bindparam("ids", expanding=True)), _E.event_id.in_(bindparam("events", expanding=True)))
# The `upto` lowest positions of each violation: all a trim can reach (see _evidence_states), not all 200.
_RANKED = (select(_E.violation_id, _E.position,
                  func.row_number().over(partition_by=_E.violation_id, order_by=_E.position).label("rank"))
           .where(_E.violation_id.in_(bindparam("ids", expanding=True))).subquery())
_POSITIONS = (select(_RANKED.c.violation_id, _RANKED.c.position).where(_RANKED.c.rank <= bindparam("upto"))
              .order_by(_RANKED.c.violation_id, _RANKED.c.position))
_TRIM = delete(EvidenceRow.__table__).where(_E.violation_id == bindparam("violation"),
                                            _E.position > bindparam("after"), _E.position < bindparam("before"))
_LINK = insert(EvidenceRow.__table__)
_HISTORY = insert(HistoryRow.__table__)
_FOLD = update(ViolationRow.__table__).where(_V.id == bindparam("row_id"))


@dataclass
class _Evidence:
    """A violation's evidence as the batch sees it: the batch's events already linked (event → position), the
    last position, the number of rows and, where this batch may pass EVIDENCE_LIMIT, its positions in order
    (those no trim of the batch can reach as None)."""

    violation_id: int
    linked: dict[str, int] = field(default_factory=dict)
    position: int = 0
    count: int = 0
    positions: list[int | None] | None = None  # None entries: positions no trim of this batch can reach
    trimmed: tuple[int, int] | None = None  # positions strictly between these are gone


@store_operation
def record_matches(session: Session, matches: Sequence[Match], *, now: datetime,
                   notifying_only: bool = False) -> list[ViolationView]:
    """Record the matches in order; one view per match, as `record_match` would return it.

    `notifying_only`: only the views whose `notify` is set (all the outbox step needs); a fold that notifies
    no one builds none.
    """
    require_aware(now, "record_match: now")
    for match in matches:
        require_aware(match.seen_at, "record_match: match.seen_at")
    if not matches:
        return []
    session.flush()  # ORM changes the caller made first, as a query would autoflush them
    connection = session.connection()
    evidence = [list(dict.fromkeys(event.id for event in m.explanation.evidence)) for m in matches]
    repository._require_stored(session, list(dict.fromkeys(i for ids in evidence for i in ids)))
    pairs = list(dict.fromkeys((m.rule_id, m.group_key) for m in matches))
    since = now - timedelta(seconds=max(m.flap_window_s for m in matches))
    rows, slow = _candidates(connection, pairs, since)
    firsts: dict[Pair, Match] = {}
    for match in matches:
        pair = (match.rule_id, match.group_key)
        if pair not in rows and pair not in slow:
            firsts.setdefault(pair, match)
    opened = _create(session, list(firsts.values()), now)
    slow.update(pair for pair in firsts if pair not in opened)  # a concurrent writer opened one first
    views: list[ViolationView | None] = [None] * len(matches)
    for index, match in enumerate(matches):
        if (match.rule_id, match.group_key) in slow:
            view = repository.record_match(session, match, now=now)
            views[index] = None if notifying_only and view.notify is None else view
    rows.update(opened)
    states = _evidence_states(connection, rows, set(opened), matches, evidence)
    folded: set[Pair] = set()
    history: list[Columns] = []
    links: list[Columns] = []
    for index, match in enumerate(matches):
        pair = (match.rule_id, match.group_key)
        if pair in slow:
            continue
        columns = rows[pair]
        if opened.pop(pair, None) is not None:  # the first match of a violation this batch opened
            notify, action, before = "trigger", "created", None
        else:
            before = columns["status"]
            notify, action = _fold(columns, match, now), "folded"
            folded.add(pair)
        added = _link(states[pair], evidence[index], now, links)
        history.append(_history(columns, now, match, action, before, added))
        if notify is not None or not notifying_only:
            views[index] = columns_view(columns, notify)
    _write(connection, list(states.values()), [rows[pair] for pair in folded], history, links)
    expire_violations(session, (rows[pair]["id"] for pair in folded))
    return [view for view in views if view is not None]


def _candidates(connection: Connection, pairs: Sequence[Pair],
                since: datetime) -> tuple[dict[Pair, Columns], set[Pair]]:
    """The unresolved violations of the pairs (the columns a fold reads), and the pairs without one that had
    one resolved since `since`."""
    active: dict[Pair, Columns] = {}
    resolved: set[Pair] = set()
    for chunk in chunks(pairs, _CHUNK):
        parameters = {"rules": sorted({rule for rule, _ in chunk}), "keys": sorted({key for _, key in chunk}),
                      "pairs": chunk, "since": since}
        for row in connection.execute(_CANDIDATES, parameters).mappings().all():
            pair = (row["rule_id"], row["group_key"])
            if row["status"] == "resolved":
                resolved.add(pair)
            else:
                active[pair] = dict(row)
    return active, resolved - active.keys()


def _create(session: Session, firsts: Sequence[Match], now: datetime) -> dict[Pair, Columns]:
    """Insert the new violations with one statement; their columns, with their ids. None inserted when a
    concurrent writer opened one of them first (the unique index of unresolved violations refuses it)."""
    if not firsts:
        return {}
    values = [repository._new_values(match, now) for match in firsts]
    try:
        with session.begin_nested():  # the savepoint is taken when the session executes
            ids = {(rule_id, group_key): violation_id
                   for violation_id, rule_id, group_key in session.execute(_CREATE, values).all()}
    except IntegrityError:
        return {}
    return {(v["rule_id"], v["group_key"]): {"id": ids[v["rule_id"], v["group_key"]], **v, **_NOT_SET_ON_CREATE}
            for v in values}


def _fold(columns: Columns, match: Match, now: datetime) -> str | None:
    """Fold a match into a violation's columns as record_match folds it into the row; its notification."""
    notify = fold_notification_of(columns, now)
    columns.update(repository._fold_values(columns["occurrences"], columns["first_seen"], columns["last_seen"],
                                           match, now))
    return notify


def _evidence_states(connection: Connection, rows: dict[Pair, Columns], opened: set[Pair],
                     matches: Sequence[Match], evidence: Sequence[list[str]]) -> dict[Pair, _Evidence]:
    """What each violation's evidence holds of the batch's events; every position of those that may pass
    EVIDENCE_LIMIT in this batch."""
    wanted: dict[Pair, set[str]] = {}
    for match, ids in zip(matches, evidence, strict=True):
        if (match.rule_id, match.group_key) in rows:
            wanted.setdefault((match.rule_id, match.group_key), set()).update(ids)
    states = {pair: _Evidence(rows[pair]["id"]) for pair in wanted}
    existing = {state.violation_id: state for pair, state in states.items() if pair not in opened}
    events = list(dict.fromkeys(i for pair in wanted if pair not in opened for i in wanted[pair]))
    for chunk in chunks(list(existing), _CHUNK):
        for violation_id, position, count in connection.execute(_EVIDENCE_STATS, {"ids": chunk}).all():
            existing[violation_id].position, existing[violation_id].count = position or 0, count
        for events_chunk in chunks(events, _CHUNK):
            for violation_id, event_id, position in connection.execute(
                    _LINKED, {"ids": chunk, "events": events_chunk}).all():
                existing[violation_id].linked[event_id] = position
    crowded: dict[int, list[int | None]] = {
        state.violation_id: [] for pair, state in states.items()
        if state.count + len(wanted[pair] - state.linked.keys()) > EVIDENCE_LIMIT}
    # A trim reads the position at index len - _KEEP_LATEST of the list; each new link moves that index on by
    # one at most, so the lowest max(KEEP_FIRST, count - _KEEP_LATEST) + 1 + (links this batch may add) are all
    # it can reach. The rest stand in as None (never read), keeping the list's length and order.
    upto = {state.violation_id: max(EVIDENCE_KEEP_FIRST, state.count - _KEEP_LATEST) + 1 + len(wanted[pair])
            for pair, state in states.items() if state.violation_id in crowded}
    for chunk in chunks([violation_id for violation_id in crowded if violation_id in existing], _CHUNK):
        limit = max(upto[violation_id] for violation_id in chunk)
        for violation_id, position in connection.execute(_POSITIONS, {"ids": chunk, "upto": limit}).all():
            crowded[violation_id].append(position)
    for state in states.values():
        positions = crowded.get(state.violation_id)
        if positions is not None:
            positions.extend([None] * (state.count - len(positions)))
        state.positions = positions
    return states


def _link(state: _Evidence, event_ids: Sequence[str], now: datetime, links: list[Columns]) -> list[str]:
    """Link the events not yet linked, then trim as record_match does (an event whose link a trim removed is
    linked again by a later match); the events linked."""
    added = [event_id for event_id in event_ids if event_id not in state.linked]
    for event_id in added:
        state.position += 1
        state.linked[event_id] = state.position
        links.append({"violation_id": state.violation_id, "event_id": event_id, "position": state.position,
                      "added_at": now})
    if added and state.positions is not None:
        state.positions.extend(range(state.position - len(added) + 1, state.position + 1))
        if len(state.positions) > EVIDENCE_LIMIT:  # keep the first EVIDENCE_KEEP_FIRST and the latest
            state.positions = state.positions[:EVIDENCE_KEEP_FIRST] + state.positions[-_KEEP_LATEST:]
            after, before = state.positions[EVIDENCE_KEEP_FIRST - 1], state.positions[EVIDENCE_KEEP_FIRST]
            if after is None or before is None:  # _evidence_states read too few positions: never trim blind
                raise StoreError(f"violation {state.violation_id}: evidence trim reached a position not read")
            state.linked = {event_id: p for event_id, p in state.linked.items() if not after < p < before}
            state.trimmed = (after, before)
    return added


def _history(columns: Columns, at: datetime, match: Match, action: str, before: str | None,
             added: list[str]) -> Columns:
    seen_at = format_time(match.seen_at)
    detail = ({"seen_at": seen_at, "evidence": added} if action == "created"
              else {"seen_at": seen_at, "occurrences": columns["occurrences"], "evidence": added})
    return history_values(columns["id"], at, action, detail, before=before, after=columns["status"])


def _write(connection: Connection, states: Sequence[_Evidence], folded: Sequence[Columns], history: list[Columns],
           links: list[Columns]) -> None:
    """Trims before links, since a trimmed event may be linked again; a link a later trim removed is left out."""
    trimmed = {state.violation_id: state.trimmed for state in states if state.trimmed is not None}
    if trimmed:
        connection.execute(_TRIM, [{"violation": violation_id, "after": after, "before": before}
                                   for violation_id, (after, before) in trimmed.items()])
        links = [link for link in links if link["violation_id"] not in trimmed
                 or not trimmed[link["violation_id"]][0] < link["position"] < trimmed[link["violation_id"]][1]]
    if links:
        connection.execute(_LINK, links)
    if history:
        connection.execute(_HISTORY, history)
    if folded:
        connection.execute(_FOLD, [{"row_id": columns["id"], **{name: columns[name] for name in _FOLDED}}
                                   for columns in folded])
