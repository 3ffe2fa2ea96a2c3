"""The one write path of the engine's matches and clears: read each rule and group's violation, fold the batch
with gpuslo.engine.transitions, write the result with a few Core statements (no ORM rows).

The embedded engine, every fleet worker (through engine_output.record_result) and `record_match` all come here.
One SELECT (FOR UPDATE on PostgreSQL; driver SQL, driver_select.py) reads the pairs' unresolved violations
and those resolved within the longest flap window (a match may reopen them); the fold runs in memory; new
violations go in with one INSERT RETURNING, and evidence, history and changed violations are written with one
statement each (driver_sql's write_rows: an executemany on SQLite, one statement over json_populate_recordset
on PostgreSQL). When a concurrent writer opened one of the violations first (the unique index of unresolved
violations refuses the insert or the reopen), the batch is read and folded again. The statements are built once,
so SQLAlchemy finds their compiled form by a memoized cache key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Select, bindparam, insert, or_, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuslo.engine import transitions
from gpuslo.engine.errors import StoreError
from gpuslo.engine.events import format_time
from gpuslo.engine.store.driver_select import driver_select
from gpuslo.engine.store.driver_sql import driver_statement
from gpuslo.engine.store.event_insert import stored_ids
from gpuslo.engine.store.evidence import Evidence
from gpuslo.engine.store.models import HistoryRow, ViolationRow
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.store.rows import (
    chunks,
    columns_view,
    expire_violations,
    history_values,
    require_aware,
    store_operation,
)
from gpuslo.engine.transitions import Step, ViolationState
from gpuslo.engine.violations import Clear, Match

Pair = tuple[str, str]
_CHUNK = 250  # pairs or ids per IN (...)
_ATTEMPTS = 3  # reads and folds of one batch while concurrent writers open its violations first

_VIOLATIONS, _HISTORY_TABLE = ViolationRow.__table__, HistoryRow.__table__
_V, _H = _VIOLATIONS.c, _HISTORY_TABLE.c
# What the fold reads; the other columns of a view (rule text, explanation, labels, place) come from the match.
_READ = ("id", "rule_id", "group_key", "group", "rulebook", "status", "first_seen", "last_seen", "occurrences",
         "created_at", "updated_at", "quiet_since", "last_notified_at", "acknowledged_at", "acknowledged_by",
         "resolved_at", "resolved_by", "flaps", "flapping", "repeat_interval_s", "flap_window_s", "resolve_after_s")
# What a transition changes (ViolationState's columns), and what the latest match sets.
_STATE = ("rulebook", "status", "first_seen", "last_seen", "occurrences", "updated_at", "quiet_since",
          "last_notified_at", "acknowledged_at", "acknowledged_by", "resolved_at", "resolved_by", "flaps", "flapping",
          "repeat_interval_s", "flap_window_s", "resolve_after_s")
_TEXT = ("rule_title", "rulebook_version", "rulebook_hash", "slo", "slo_objective", "severity", "summary",
         "remediation", "runbook", "explanation", "labels", "host", "gpu")


def _candidates(*, plain_lists: bool) -> Select[Any]:
    """Unresolved violations of the pairs, and those resolved since `since` (a match may reopen them).
    `plain_lists`: the two plain IN lists beside the pairs' are what lets SQLite search the (rule_id, group_key)
    index: for a row-value IN list alone it scanned the whole violations table (EXPLAIN QUERY PLAN;
    tests/store/test_batch.py checks the plan). PostgreSQL takes the pairs alone: the unnest of the pairs then
    drives a nested loop over that index, where with the plain lists too it searched the index by rule only
    and filtered the keys (EXPLAIN ANALYZE on 200k violations; docs/notes/h17j.md)."""
    pair = tuple_(_V.rule_id, _V.group_key).in_(bindparam("pairs", expanding=True))
    lists = (_V.rule_id.in_(bindparam("rules", expanding=True)),
             _V.group_key.in_(bindparam("keys", expanding=True))) if plain_lists else ()
    return (select(*(_V[name] for name in _READ))
            .where(*lists, pair, or_(_V.status != "resolved", _V.resolved_at >= bindparam("since")))
            .order_by(_V.id)
            # FOR NO KEY UPDATE: serializes writers of these violations as FOR UPDATE would, but not the
            # foreign-key checks (FOR KEY SHARE) of rows that cite them (slo_causes, evidence). With FOR UPDATE
            # two fleet workers, each holding violations the other's SLO causes cite, deadlocked. SQLite
            # ignores it: BEGIN IMMEDIATE already serializes writers there.
            .with_for_update(key_share=True))


_CANDIDATES, _CANDIDATES_BY_PAIR = _candidates(plain_lists=True), _candidates(plain_lists=False)
_REOPENS = select(_H.violation_id, _H.at).where(_H.violation_id.in_(bindparam("ids", expanding=True)),
                                                _H.action == "reopened", _H.at >= bindparam("since"))
_STORED_TEXT = select(_V.id, *(_V[name] for name in _TEXT)).where(_V.id.in_(bindparam("ids", expanding=True)))
# Plain INSERT, not ON CONFLICT DO NOTHING: SQLAlchemy compiles a dialect's INSERT construct on every execution.
_CREATE = insert(_VIOLATIONS).returning(_V.id, _V.rule_id, _V.group_key)
_CHANGE = update(_VIOLATIONS).where(_V.id == bindparam("row_id"))
_HISTORY = insert(_HISTORY_TABLE)


@dataclass(frozen=True)
class Recorded:
    """What one match or clear changed: the violation as it is after it, with `notify` set for receivers."""

    cause: Match | Clear
    view: ViolationView


@dataclass(frozen=True)
class _Fold:
    """A batch folded in memory: each change in order (item index, pair, step), each pair's final state, the
    stored violation of each pair it changes (None: a new one) and whether a write may hit the unique index."""

    steps: list[tuple[int, Pair, Step]]
    final: dict[Pair, ViolationState]
    rows: dict[Pair, int | None]
    risky: bool


@store_operation
def record(session: Session, items: Sequence[Match | Clear], *, now: datetime,
           notifying_only: bool = False, evidence_stored: bool = False) -> list[Recorded]:
    """Fold the matches and clears into their violations in order, in the caller's transaction; what each one
    changed (a clear that resolves nothing changed nothing). `notifying_only`: only the changes whose `notify`
    is set (all the outbox step needs); a fold that notifies no one builds no view. `evidence_stored`: the
    caller knows every evidence event is stored (the embedded engine evaluates only events ingest stored), so
    the SELECT that checks it first is skipped; the evidence table's foreign key still refuses one that is not
    (an IntegrityError when the links are written, the transaction then rolled back)."""
    require_aware(now, "record_match: now")
    matches = [item for item in items if isinstance(item, Match)]
    for match in matches:
        require_aware(match.seen_at, "record_match: match.seen_at")
    if not items:
        return []
    session.flush()  # ORM changes the caller made first, as a query would autoflush them
    if not evidence_stored:
        _require_stored(session, list(dict.fromkeys(e.id for m in matches for e in m.explanation.evidence)))
    connection = session.connection()
    refused: IntegrityError | None = None
    texts: dict[int, dict[str, Any]] = {}  # each match's text columns, built once (by id: the items outlive it)
    for _attempt in range(_ATTEMPTS):
        fold = _fold(connection, items, now)
        if not fold.steps:
            return []
        stored_text = _stored_text(connection, fold, notifying_only)  # before the write changes it
        try:
            with session.begin_nested() if fold.risky else nullcontext():  # the savepoint a retry rolls back
                ids = _write_violations(session.connection(), fold, texts)  # asking for it takes the savepoint
        except IntegrityError as exc:  # a concurrent writer opened one of these violations first: fold into it
            refused = exc
            continue
        recorded = _write_changes(connection, items, fold, ids, stored_text, now, notifying_only, texts)
        expire_violations(session, (ids[pair] for pair, row in fold.rows.items() if row is not None))
        return recorded
    raise StoreError(f"record: the unique index of unresolved violations refused the batch {_ATTEMPTS} times "
                     f"in a row (concurrent writers opening the same violations?): {refused}") from refused


def record_match(session: Session, match: Match, *, now: datetime) -> ViolationView:
    """Fold one match into the unresolved violation of its rule and group key, reopen the one resolved within the
    rule's flap window, or open a new one. The view's `notify` says what receivers should get."""
    return record(session, [match], now=now)[0].view


def _require_stored(session: Session, ids: Sequence[str]) -> None:
    """Refuse evidence that is not stored, before anything is written."""
    missing = set(ids) - stored_ids(session, ids)
    if missing:
        raise StoreError(f"record_match: evidence events not stored: {', '.join(sorted(missing))}")


def _fold(connection: Connection, items: Sequence[Match | Clear], now: datetime) -> _Fold:
    """Read the pairs' violations and apply every item to them in order (gpuslo.engine.transitions)."""
    windows = [item.flap_window_s for item in items if isinstance(item, Match)]
    stored = _stored_states(connection, list(dict.fromkeys((i.rule_id, i.group_key) for i in items)),
                            now - timedelta(seconds=max(windows, default=0.0)))
    current: dict[Pair, ViolationState] = {pair: state for pair, (_, state) in stored.items()}
    rows: dict[Pair, int | None] = {}
    steps: list[tuple[int, Pair, Step]] = []
    risky = False
    for index, item in enumerate(items):
        pair = (item.rule_id, item.group_key)
        if isinstance(item, Match):
            step: Step | None = transitions.apply_match(current.get(pair), item, now)
        else:
            step = transitions.apply_clear(current.get(pair), item, now)
        if step is None:
            continue
        if step.opens_new:
            if rows.get(pair, 0) is None:  # a batch's own violation always reopens (resolved now, in its window)
                raise StoreError(f"record: {pair[0]!r} {pair[1]!r}: two new violations in one batch")
            rows[pair] = None
        elif pair not in rows:
            rows[pair] = stored[pair][0]
        risky = risky or step.opens_new or step.action == "reopened"
        current[pair] = step.after
        steps.append((index, pair, step))
    return _Fold(steps, {pair: current[pair] for pair in rows}, rows, risky)


def _stored_states(connection: Connection, pairs: Sequence[Pair],
                   since: datetime) -> dict[Pair, tuple[int, ViolationState]]:
    """Each pair's unresolved violation, else its latest one resolved since `since` (with its reopen times)."""
    found: dict[Pair, Mapping[Any, Any]] = {}
    sqlite = connection.dialect.name == "sqlite"
    candidates = driver_select(connection.dialect, _CANDIDATES if sqlite else _CANDIDATES_BY_PAIR)
    for chunk in chunks(pairs, _CHUNK):
        parameters: dict[str, Any] = {"pairs": chunk, "since": since}
        if sqlite:
            parameters.update(rules=sorted({rule for rule, _ in chunk}), keys=sorted({key for _, key in chunk}))
        for row in candidates.mappings(connection, parameters):
            pair, held = (row["rule_id"], row["group_key"]), found.get((row["rule_id"], row["group_key"]))
            if held is None or _rank(row) > _rank(held):
                found[pair] = row
    reopens: dict[int, list[datetime]] = {}
    resolved = [row["id"] for row in found.values() if row["status"] == "resolved"]
    for chunk in chunks(resolved, _CHUNK):
        for violation_id, at in driver_select(connection.dialect, _REOPENS).rows(connection,
                                                                              {"ids": chunk, "since": since}):
            reopens.setdefault(violation_id, []).append(at)
    return {pair: (row["id"], ViolationState.of(row, reopens.get(row["id"], ()))) for pair, row in found.items()}


def _rank(row: Mapping[Any, Any]) -> tuple[bool, datetime | None, int]:
    """The unresolved violation of a pair first, then the latest resolved one (by resolved_at, then id)."""
    return (row["status"] != "resolved", row["resolved_at"], row["id"])


def _text(match: Match, texts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The columns the latest match sets: its rule text, explanation, labels and place; built once per match
    and batch (the row written and the views returned share it; neither changes it)."""
    found = texts.get(id(match))
    if found is not None:
        return found
    latest = max(match.explanation.evidence, key=lambda e: (e.time, e.id), default=None)
    host = match.group.get("host", latest.host if latest else None)
    gpu = match.group.get("gpu", latest.gpu if latest else None)
    found = texts[id(match)] = {
        "rule_title": match.rule_title, "rulebook_version": match.rulebook_version,
        "rulebook_hash": match.rulebook_hash, "slo": match.slo, "slo_objective": match.slo_objective,
        "severity": match.severity, "summary": match.summary, "remediation": match.remediation,
        "runbook": match.runbook, "explanation": match.explanation.to_dict(), "labels": dict(match.labels),
        "host": None if host is None else str(host), "gpu": None if gpu is None else int(gpu)}
    return found


def _columns(state: ViolationState, texts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The columns a state writes: the transition's, and the latest match's when one was folded in."""
    columns = {name: getattr(state, name) for name in _STATE}
    if state.latest is not None:
        columns.update(_text(state.latest, texts))
    return columns


def _write_violations(connection: Connection, fold: _Fold, texts: dict[int, dict[str, Any]]) -> dict[Pair, int]:
    """Insert the new violations and change the stored ones to their final state; every pair's violation id."""
    ids = {pair: row for pair, row in fold.rows.items() if row is not None}
    changed: dict[bool, list[dict[str, Any]]] = {}
    for pair, row in ids.items():
        state = fold.final[pair]
        changed.setdefault(state.latest is not None, []).append({"row_id": row, **_columns(state, texts)})
    for parameters in changed.values():  # one executemany per column set, as driver SQL (driver_sql.py)
        driver_statement(connection.dialect, _CHANGE, list(parameters[0])).write_rows(connection, parameters)
    new = [{"rule_id": pair[0], "group_key": pair[1], "group": dict(fold.final[pair].group),
            "created_at": fold.final[pair].created_at, **_columns(fold.final[pair], texts)}
           for pair, row in fold.rows.items() if row is None]
    if new:  # one multi-row INSERT ... RETURNING as driver SQL (the ids, rule ids and keys need no processing)
        created = driver_statement(connection.dialect, _CREATE, list(new[0])).insert_returning(connection, new)
        ids.update({(rule_id, group_key): violation_id for violation_id, rule_id, group_key in created})
    return ids


def _write_changes(connection: Connection, items: Sequence[Match | Clear], fold: _Fold, ids: Mapping[Pair, int],
                   stored_text: Mapping[int, Mapping[str, Any]], now: datetime,
                   notifying_only: bool, texts: dict[int, dict[str, Any]]) -> list[Recorded]:
    """Link the matches' evidence, write a history line per change; what each change returns."""
    evidence = {index: list(dict.fromkeys(e.id for e in item.explanation.evidence))
                for index, item in enumerate(items) if isinstance(item, Match)}
    wanted: dict[Pair, set[str]] = {}
    for index, pair, _step in fold.steps:
        if index in evidence:
            wanted.setdefault(pair, set()).update(evidence[index])
    links = Evidence(connection, ids, {pair for pair, row in fold.rows.items() if row is None}, wanted)
    history, recorded = [], []
    for index, pair, step in fold.steps:
        item = items[index]
        if isinstance(item, Match):
            added = links.link(pair, evidence[index], now)
            detail: dict[str, Any] = {"seen_at": format_time(item.seen_at)}
            if not step.opens_new:
                detail["occurrences"] = step.after.occurrences
            detail = {**detail, "evidence": added, **step.detail}
        else:
            detail = dict(step.detail)
        history.append(history_values(ids[pair], now, step.action, detail,
                                      before=None if step.before is None else step.before.status,
                                      after=step.after.status))
        if step.notify is not None or not notifying_only:
            recorded.append(Recorded(item, _view(ids[pair], step, stored_text.get(ids[pair]), texts)))
    links.write()
    if history:
        driver_statement(connection.dialect, _HISTORY, list(history[0])).write_rows(connection, history)
    return recorded


def _stored_text(connection: Connection, fold: _Fold, notifying_only: bool) -> dict[int, dict[str, Any]]:
    """The stored text columns of violations a returned change shows before any match of the batch folded in
    (read before the batch writes the latest match's)."""
    wanted = [violation_id for _, pair, step in fold.steps if (violation_id := fold.rows[pair]) is not None
              and step.after.latest is None and (step.notify is not None or not notifying_only)]
    found: dict[int, dict[str, Any]] = {}
    for chunk in chunks(list(dict.fromkeys(wanted)), _CHUNK):
        for row in driver_select(connection.dialect, _STORED_TEXT).mappings(connection, {"ids": chunk}):
            found[row["id"]] = {name: row[name] for name in _TEXT}
    return found


def _view(violation_id: int, step: Step, stored_text: Mapping[str, Any] | None,
          texts: dict[int, dict[str, Any]]) -> ViolationView:
    state = step.after
    columns = {"id": violation_id, "rule_id": state.rule_id, "group_key": state.group_key, "group": state.group,
               "created_at": state.created_at, **{name: getattr(state, name) for name in _STATE},
               **(_text(state.latest, texts) if state.latest is not None else stored_text or {})}
    return columns_view(columns, step.notify)
