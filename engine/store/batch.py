"""The engine's write path: every match of one engine batch recorded with a few statements.

The result is what `repository.record_match` gives when called once per match in order (a test compares the
two): the active violations of all (rule, group key) pairs are read in one SELECT (FOR UPDATE on PostgreSQL),
matches fold in memory, and evidence and history rows go in as bulk INSERTs, changed rows as one executemany
UPDATE. Pairs that may reopen a recently resolved violation (the flap path), and new violations that race a
concurrent writer, take the per-match path instead, which decides those cases exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select, tuple_
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, defer

from gpuslo.engine.events import format_time
from gpuslo.engine.store import repository
from gpuslo.engine.store.lifecycle import fold_notification
from gpuslo.engine.store.models import EVIDENCE_LIMIT, EvidenceRow, HistoryRow, ViolationRow
from gpuslo.engine.store.rows import ENGINE_ACTOR, require_aware, store_operation, violation_view
from gpuslo.engine.store.views import ViolationView
from gpuslo.engine.violations import Match

Pair = tuple[str, str]
_CHUNK = 250  # pairs per IN (...): two bound parameters each


@dataclass
class _Linked:
    """What the batch knows of one violation's evidence: links among the batch's events, next position, count."""

    row: ViolationRow
    created: bool
    linked: set[str] = field(default_factory=set)
    position: int = 0
    count: int = 0


@store_operation
def record_matches(session: Session, matches: Sequence[Match], *, now: datetime) -> list[ViolationView]:
    """Record the matches in order; one view per match, as `record_match` would return it."""
    require_aware(now, "record_match: now")
    for match in matches:
        require_aware(match.seen_at, "record_match: match.seen_at")
    evidence = [list(dict.fromkeys(event.id for event in m.explanation.evidence)) for m in matches]
    repository._require_stored(session, list(dict.fromkeys(i for ids in evidence for i in ids)))
    pairs = list(dict.fromkeys((m.rule_id, m.group_key) for m in matches))
    active = _active_rows(session, pairs, fold_only=True)
    missing = [pair for pair in pairs if pair not in active]
    window = max((m.flap_window_s for m in matches), default=0.0)
    slow = _recently_resolved(session, missing, now - timedelta(seconds=window))
    firsts = {}
    for match in matches:
        pair = (match.rule_id, match.group_key)
        if pair in missing and pair not in slow:
            firsts.setdefault(pair, match)
    created = _create(session, list(firsts.values()), now)
    if created is None:  # a concurrent writer opened one of them: the per-match path folds into it
        slow.update(firsts)
        created = {}
    views: list[ViolationView | None] = [None] * len(matches)
    for index, match in enumerate(matches):
        if (match.rule_id, match.group_key) in slow:
            views[index] = repository.record_match(session, match, now=now)
    states = _evidence_states(session, active, created, {i for ids in evidence for i in ids})
    history: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    for index, match in enumerate(matches):
        state = states.get((match.rule_id, match.group_key))
        if state is not None:
            views[index] = _apply(state, match, evidence[index], now, history, links)
    if links:
        session.execute(insert(EvidenceRow.__table__), links)
    for state in states.values():
        if state.count > EVIDENCE_LIMIT:
            repository._trim_evidence(session, state.row.id)
    if history:
        session.execute(insert(HistoryRow.__table__), history)
    session.flush()
    return [view for view in views if view is not None]


def _active_rows(session: Session, pairs: Sequence[Pair], *, fold_only: bool = False) -> dict[Pair, ViolationRow]:
    """The unresolved violations of the pairs. `fold_only`: every row gets a match folded into it, which
    replaces its explanation (the largest column), so that is not read."""
    found: dict[Pair, ViolationRow] = {}
    for start in range(0, len(pairs), _CHUNK):
        query = (select(ViolationRow).options(*((defer(ViolationRow.explanation),) if fold_only else ()))
                 .where(tuple_(ViolationRow.rule_id, ViolationRow.group_key).in_(pairs[start:start + _CHUNK]),
                        ViolationRow.status != "resolved")
                 .order_by(ViolationRow.id)
                 .with_for_update())  # ignored by SQLite, where BEGIN IMMEDIATE already serializes writers
        found.update(((row.rule_id, row.group_key), row) for row in session.scalars(query))
    return found


def _recently_resolved(session: Session, pairs: Sequence[Pair], since: datetime) -> set[Pair]:
    """Pairs with a violation resolved since `since` (or later): a match may reopen it."""
    found: set[Pair] = set()
    for start in range(0, len(pairs), _CHUNK):
        query = select(ViolationRow.rule_id, ViolationRow.group_key).where(
            tuple_(ViolationRow.rule_id, ViolationRow.group_key).in_(pairs[start:start + _CHUNK]),
            ViolationRow.status == "resolved", ViolationRow.resolved_at >= since)
        found.update(session.execute(query).tuples())
    return found


def _create(session: Session, firsts: Sequence[Match], now: datetime) -> dict[Pair, ViolationRow] | None:
    """Insert the new violations with one executemany and read them back; None when one already exists
    (nothing inserted then). Core, not the ORM: its flush inserts row by row to learn each id."""
    if not firsts:
        return {}
    table = ViolationRow.__table__
    columns = [column.key for column in table.columns if column.key != "id"]
    values = []
    for match in firsts:
        row = repository._new_row(match, now)
        values.append({name: getattr(row, name) for name in columns})
    try:
        with session.begin_nested():
            session.execute(insert(table), values)
    except IntegrityError:
        return None
    return _active_rows(session, [(m.rule_id, m.group_key) for m in firsts])


def _evidence_states(session: Session, active: dict[Pair, ViolationRow], created: dict[Pair, ViolationRow],
                     event_ids: set[str]) -> dict[Pair, _Linked]:
    states = {pair: _Linked(row, created=True) for pair, row in created.items()}
    by_id = {row.id: _Linked(row, created=False) for row in active.values()}
    ids = list(by_id)
    wanted = list(event_ids)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        stats = select(EvidenceRow.violation_id, func.max(EvidenceRow.position), func.count()).where(
            EvidenceRow.violation_id.in_(chunk)).group_by(EvidenceRow.violation_id)
        for violation_id, position, count in session.execute(stats):
            by_id[violation_id].position, by_id[violation_id].count = position or 0, count
        for events_start in range(0, len(wanted), 500):
            linked = select(EvidenceRow.violation_id, EvidenceRow.event_id).where(
                EvidenceRow.violation_id.in_(chunk), EvidenceRow.event_id.in_(wanted[events_start:events_start + 500]))
            for violation_id, event_id in session.execute(linked):
                by_id[violation_id].linked.add(event_id)
    states.update(((state.row.rule_id, state.row.group_key), state) for state in by_id.values())
    return states


def _apply(state: _Linked, match: Match, evidence: Sequence[str], now: datetime, history: list[dict[str, Any]],
           links: list[dict[str, Any]]) -> ViolationView:
    """One match on one violation, as record_match does it: the view, and the rows to insert."""
    row = state.row
    added = [event_id for event_id in evidence if event_id not in state.linked]
    for event_id in added:
        state.position += 1
        links.append({"violation_id": row.id, "event_id": event_id, "position": state.position, "added_at": now})
    state.linked.update(added)
    state.count += len(added)
    seen_at = format_time(match.seen_at)
    if state.created:  # the first match of a violation this batch created
        state.created = False
        history.append(_history(row.id, now, "created", {"seen_at": seen_at, "evidence": added}, None, "open"))
        return violation_view(row, "trigger")
    before, notify = row.status, fold_notification(row, now)
    repository._fold(row, match, now)
    history.append(_history(row.id, now, "folded", {"seen_at": seen_at, "occurrences": row.occurrences,
                                                    "evidence": added}, before, row.status))
    return violation_view(row, notify)


def _history(violation_id: int, at: datetime, action: str, detail: dict[str, Any], before: str | None,
             after: str) -> dict[str, Any]:
    return {"violation_id": violation_id, "at": at, "action": action, "actor": ENGINE_ACTOR, "detail": detail,
            "status_before": before, "status_after": after, "source": None, "comment": None}
