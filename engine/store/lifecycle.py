"""Violation lifecycle in the database: human actions, auto-resolve, and the reopen of a flapping violation.

Every change appends a violation_history line with the actor, the status before and after and the source
address. Decisions come from gpuslo.engine.incidents; this module applies them. The caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuslo.engine import incidents
from gpuslo.engine.errors import InvalidTransition, NotFoundError, StoreError
from gpuslo.engine.events import format_time
from gpuslo.engine.store.models import HistoryRow, ViolationRow
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.store.rows import (
    ENGINE_ACTOR,
    append_history,
    chunks,
    columns_view,
    expire_violations,
    history_values,
    require_aware,
    store_operation,
    violation_view,
)
from gpuslo.engine.violations import Clear, Match

MAX_COMMENT = 10_000
_HISTORY_ACTION = {"acknowledge": "acknowledged", "resolve": "resolved", "reopen": "reopened"}


def _locked(session: Session, violation_id: int) -> ViolationRow:
    row = session.scalars(select(ViolationRow).where(ViolationRow.id == violation_id).with_for_update()).first()
    if row is None:
        raise NotFoundError(f"no violation with id {violation_id}")
    return row


def _clean_comment(comment: str | None) -> str | None:
    text = (comment or "").strip()
    if len(text) > MAX_COMMENT:
        raise StoreError(f"comment is {len(text)} characters long; at most {MAX_COMMENT} are kept")
    return text or None


def _change(session: Session, violation_id: int, action: str, *, actor: str, comment: str | None,
            now: datetime, source: str | None) -> tuple[ViolationRow, str]:
    """Lock the violation, check the transition, set the new status and write the history line."""
    require_aware(now, action)
    row = _locked(session, violation_id)
    before = row.status
    after = incidents.transition(action, before)
    if after is None:
        raise InvalidTransition(incidents.refusal(action, violation_id, before))
    row.status, row.updated_at = after, now
    append_history(session, row.id, now, _HISTORY_ACTION[action], {}, actor=actor, before=before, after=after,
                   source=source, comment=_clean_comment(comment))
    return row, before


@store_operation
def acknowledge(session: Session, violation_id: int, *, actor: str, comment: str | None = None,
                now: datetime, source: str | None = None) -> ViolationView:
    """open → acknowledged: someone is on it; repeats stop notifying."""
    row, _ = _change(session, violation_id, "acknowledge", actor=actor, comment=comment, now=now, source=source)
    row.acknowledged_at, row.acknowledged_by = now, actor
    session.flush()
    return violation_view(row, "acknowledge")


@store_operation
def resolve(session: Session, violation_id: int, *, actor: str, comment: str | None = None,
            now: datetime, source: str | None = None) -> ViolationView:
    """open or acknowledged → resolved; a match within the flap window reopens it."""
    row, _ = _change(session, violation_id, "resolve", actor=actor, comment=comment, now=now, source=source)
    row.resolved_at, row.resolved_by = now, actor
    session.flush()
    return violation_view(row, "resolve")


@store_operation
def reopen(session: Session, violation_id: int, *, actor: str, comment: str | None = None,
           now: datetime, source: str | None = None) -> ViolationView:
    """resolved → open; refused while another violation of the same rule and group is unresolved.

    The quiet period of auto-resolve restarts now, so a reopened violation is not resolved again at once.
    """
    row = _locked(session, violation_id)
    if row.status == "resolved":
        other = session.scalars(select(ViolationRow.id).where(
            ViolationRow.rule_id == row.rule_id, ViolationRow.group_key == row.group_key,
            ViolationRow.status != "resolved")).first()
        if other is not None:
            raise InvalidTransition(f"violation {violation_id} cannot be reopened: violation {other} is already "
                                    f"unresolved for rule {row.rule_id!r} and group {row.group_key!r}")
    row, _ = _change(session, violation_id, "reopen", actor=actor, comment=comment, now=now, source=source)
    row.resolved_at = row.resolved_by = row.acknowledged_at = row.acknowledged_by = None
    row.quiet_since = row.last_notified_at = now
    session.flush()
    return violation_view(row, "trigger")


@store_operation
def comment(session: Session, violation_id: int, *, actor: str, comment: str, now: datetime,
            source: str | None = None) -> ViolationView:
    """Add a comment to the history; the status does not change."""
    require_aware(now, "comment")
    text = _clean_comment(comment)
    if text is None:
        raise StoreError("comment: the comment is empty")
    row = _locked(session, violation_id)
    row.updated_at = now
    append_history(session, row.id, now, "commented", {}, actor=actor, before=row.status, after=row.status,
                   source=source, comment=text)
    return violation_view(row)


@store_operation
def auto_resolve_due(session: Session, now: datetime, quiet_by_rule: Mapping[str, float]) -> list[ViolationView]:
    """Resolve every unresolved violation that had no new match for its quiet period; returns those resolved.

    `quiet_by_rule` maps a rule id to the loaded rule's `resolve.after` and wins over the value stored with the
    violation; a flapping violation waits at least its flap window (incidents.quiet_period_s).
    """
    require_aware(now, "auto_resolve_due")
    candidates = session.scalars(
        select(ViolationRow).where(ViolationRow.status != "resolved")
        .where(ViolationRow.resolve_after_s.is_not(None) | ViolationRow.flapping
               | ViolationRow.rule_id.in_(list(quiet_by_rule)))
        .order_by(ViolationRow.id).with_for_update()
    )
    resolved = []
    for row in candidates:
        view = violation_view(row)
        if not incidents.due_for_auto_resolve(view, now, quiet_by_rule.get(row.rule_id)):
            continue
        quiet = incidents.quiet_period_s(view, quiet_by_rule.get(row.rule_id))
        before = row.status
        row.status, row.resolved_at, row.resolved_by, row.updated_at = "resolved", now, ENGINE_ACTOR, now
        row.flapping = False  # quiet for at least the flap window: the flapping is over
        append_history(session, row.id, now, "resolved",
                       {"reason": "quiet", "quiet_s": quiet, "quiet_since": format_time(view.quiet_since)},
                       before=before, after="resolved")
        resolved.append(violation_view(row, "resolve"))
    return resolved


# Core statements, built once. The unresolved violations of one rule's cleared group keys, only the columns that
# decide (FOR UPDATE: ignored by SQLite, where BEGIN IMMEDIATE already serializes writers); the rows a clear
# resolves are read whole.
_VIOLATIONS = ViolationRow.__table__
_CLEARABLE = (select(_VIOLATIONS.c.id, _VIOLATIONS.c.group_key, _VIOLATIONS.c.last_seen)
              .where(_VIOLATIONS.c.rule_id == bindparam("rule_id"), _VIOLATIONS.c.rulebook == bindparam("rulebook"),
                     _VIOLATIONS.c.group_key.in_(bindparam("keys", expanding=True)),
                     _VIOLATIONS.c.status != "resolved")
              .order_by(_VIOLATIONS.c.id).with_for_update())
_WHOLE = select(_VIOLATIONS).where(_VIOLATIONS.c.id.in_(bindparam("ids", expanding=True)))
_RESOLVE = update(_VIOLATIONS).where(_VIOLATIONS.c.id == bindparam("row_id"))
_HISTORY = insert(HistoryRow.__table__)
_CLEAR_KEYS = 500  # group keys per IN (...)


@store_operation
def resolve_cleared(session: Session, clears: Sequence[Clear], now: datetime) -> list[ViolationView]:
    """Resolve the unresolved violation of each clear's rule and group key (`resolve: {event, if}`), in order.

    A clearing event older than the violation's last match leaves it open (the match came after the clear),
    and a later clear of the same key in the batch may still resolve it; the first one that does is recorded.
    """
    require_aware(now, "resolve_cleared")
    if not clears:
        return []
    session.flush()  # ORM changes the caller made first, as a query would autoflush them
    connection = session.connection()
    resolving: dict[int, Clear] = {}  # violation id → the clear that resolves it, in the order they do
    unresolved = _unresolved(connection, clears)
    for clear in clears:
        found = unresolved.get((clear.rule_id, clear.rulebook, clear.group_key))
        if found is not None and found[0] not in resolving and clear.event.time >= found[1]:
            resolving[found[0]] = clear
    if not resolving:
        return []
    rows = {row["id"]: dict(row) for row in connection.execute(_WHOLE, {"ids": list(resolving)}).mappings().all()}
    changes, history, resolved = [], [], []
    for violation_id, clear in resolving.items():
        columns = rows[violation_id]
        before = columns["status"]
        change = {"status": "resolved", "resolved_at": now, "resolved_by": ENGINE_ACTOR, "updated_at": now,
                  "flapping": False}
        columns.update(change)
        changes.append({"row_id": violation_id, **change})
        history.append(history_values(violation_id, now, "resolved",
                                      {"reason": "cleared", "event_id": clear.event.id, "event_kind": clear.event.kind,
                                       "event_time": format_time(clear.event.time)}, before=before, after="resolved"))
        resolved.append(columns_view(columns, "resolve"))
    connection.execute(_RESOLVE, changes)
    connection.execute(_HISTORY, history)
    expire_violations(session, resolving)
    return resolved


def _unresolved(connection: Connection, clears: Sequence[Clear]) -> dict[tuple[str, str, str], tuple[int, datetime]]:
    """(rule, rulebook, group key) of the clears → id and last_seen of its unresolved violation, where it has one.

    One query per rule with clears (a plain IN list of group keys is far cheaper to bind than one of tuples).
    """
    keys: dict[tuple[str, str], dict[str, None]] = {}
    for clear in clears:
        keys.setdefault((clear.rule_id, clear.rulebook), {})[clear.group_key] = None
    found: dict[tuple[str, str, str], tuple[int, datetime]] = {}
    for (rule_id, rulebook), group_keys in keys.items():
        for chunk in chunks(list(group_keys), _CLEAR_KEYS):
            for violation_id, group_key, last_seen in connection.execute(
                    _CLEARABLE, {"rule_id": rule_id, "rulebook": rulebook, "keys": chunk}).all():
                found.setdefault((rule_id, rulebook, group_key), (violation_id, last_seen))
    return found


@dataclass(frozen=True)
class _Incident:
    """The lifecycle attributes of a row (incidents.IncidentLike), read as violation_view reads them.

    What fold_notification decides on: a full ViolationView copies the explanation, group and labels, and was
    the larger part of a fold's cost on the engine's write path.
    """

    status: str
    flapping: bool
    resolved_at: datetime | None
    last_notified_at: datetime | None
    quiet_since: datetime
    repeat_interval_s: float
    flap_window_s: float
    resolve_after_s: float | None

    @classmethod
    def of(cls, columns: Mapping[str, Any]) -> _Incident:
        return cls(columns["status"], bool(columns["flapping"]), columns["resolved_at"], columns["last_notified_at"],
                   columns["quiet_since"] or columns["updated_at"], columns["repeat_interval_s"],
                   columns["flap_window_s"], columns["resolve_after_s"])


_INCIDENT_COLUMNS = ("status", "flapping", "resolved_at", "last_notified_at", "quiet_since", "updated_at",
                     "repeat_interval_s", "flap_window_s", "resolve_after_s")


def fold_notification(row: ViolationRow, now: datetime) -> str | None:
    """Whether a match folding into `row` notifies again (repeat_interval); marks it notified if so."""
    notify = fold_notification_of({name: getattr(row, name) for name in _INCIDENT_COLUMNS}, now)
    if notify is not None:
        row.last_notified_at = now
    return notify


def fold_notification_of(columns: dict[str, Any], now: datetime) -> str | None:
    """fold_notification for a violation held as column values (the batch write path, which reads no rows)."""
    notify = incidents.notification_for("fold", _Incident.of(columns), now)
    if notify is not None:
        columns["last_notified_at"] = now
    return notify


def reopen_for_match(session: Session, match: Match, now: datetime) -> tuple[ViolationRow, dict[str, Any]] | None:
    """Reopen the violation of the match's rule and group resolved within the flap window, if there is one.

    Returns the row (status open, flaps counted, flapping marked at FLAP_THRESHOLD reopens in the window) and
    the history detail of the reopen, whose `notify` says what receivers get; None when a new one must open.
    """
    latest = session.scalars(
        select(ViolationRow).where(ViolationRow.rule_id == match.rule_id, ViolationRow.group_key == match.group_key,
                                   ViolationRow.status == "resolved")
        .order_by(ViolationRow.resolved_at.desc(), ViolationRow.id.desc()).limit(1).with_for_update()
    ).first()
    if latest is None:
        return None
    before = violation_view(latest)
    if incidents.decide_match(None, before, now, match.flap_window_s) != "reopen":
        return None
    since = now - timedelta(seconds=match.flap_window_s)
    reopens = list(session.scalars(select(HistoryRow.at).where(
        HistoryRow.violation_id == latest.id, HistoryRow.action == "reopened", HistoryRow.at >= since)))
    notify = incidents.notification_for("reopen", before, now)
    try:
        with session.begin_nested():
            latest.status, latest.resolved_at, latest.resolved_by = "open", None, None
            latest.acknowledged_at = latest.acknowledged_by = None
            latest.flaps = (latest.flaps or 0) + 1
            latest.flapping = bool(latest.flapping) or incidents.is_flapping([*reopens, now], now,
                                                                             match.flap_window_s)
            if notify is not None:
                latest.last_notified_at = now
            session.flush()
    except IntegrityError:  # a concurrent writer opened a new violation first: the caller folds into it
        return None
    detail = {"reason": "flap", "resolved_at": format_time(before.resolved_at or now), "flaps": latest.flaps,
              "flapping": latest.flapping, "notify": notify}
    return latest, detail
