"""Violation lifecycle in the database: human actions and auto-resolve (the engine's matches and clears are
store.violations).

Every change appends a violation_history line with the actor, the status before and after and the source
address. gpuslo.engine.transitions decides and returns the new state; this module reads the row, writes the
state back and the history line. The caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuslo.engine import transitions
from gpuslo.engine.errors import InvalidTransition, NotFoundError, StoreError
from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.store.rows import append_history, require_aware, store_operation, violation_fields, violation_view
from gpuslo.engine.transitions import Step, ViolationState

MAX_COMMENT = 10_000
# What a transition changes on a row (ViolationState's columns).
_STATE = ("status", "updated_at", "quiet_since", "last_notified_at", "acknowledged_at", "acknowledged_by",
          "resolved_at", "resolved_by", "flapping")


def _locked(session: Session, violation_id: int) -> ViolationRow:
    # FOR NO KEY UPDATE (as in violations.py): a transition never changes the id, so rows citing it stay writable.
    row = session.scalars(select(ViolationRow).where(ViolationRow.id == violation_id)
                          .with_for_update(key_share=True)).first()
    if row is None:
        raise NotFoundError(f"no violation with id {violation_id}")
    return row


def _clean_comment(comment: str | None) -> str | None:
    text = (comment or "").strip()
    if len(text) > MAX_COMMENT:
        raise StoreError(f"comment is {len(text)} characters long; at most {MAX_COMMENT} are kept")
    return text or None


def _state(row: ViolationRow) -> ViolationState:
    return ViolationState.of(violation_fields(row))


def _apply(session: Session, row: ViolationRow, step: Step, *, actor: str, source: str | None = None,
           comment: str | None = None) -> None:
    """Write what the step changed to the row, and its history line."""
    before = step.before
    for name in _STATE:
        if before is None or getattr(step.after, name) != getattr(before, name):
            setattr(row, name, getattr(step.after, name))
    append_history(session, row.id, step.after.updated_at, step.action, dict(step.detail), actor=actor,
                   before=before.status if before else None, after=step.after.status, source=source,
                   comment=comment)


def _change(session: Session, violation_id: int, action: str, *, actor: str, comment: str | None,
            now: datetime, source: str | None) -> ViolationView:
    """Lock the violation, apply the human action (refused when not allowed from its status), write the row
    and the history line; the view, whose `notify` says what receivers get."""
    require_aware(now, action)
    row = _locked(session, violation_id)
    step = transitions.apply_action(_state(row), action, actor, now)
    if step is None:
        raise InvalidTransition(transitions.refusal(action, violation_id, row.status))
    _apply(session, row, step, actor=actor, source=source, comment=_clean_comment(comment))
    session.flush()
    return violation_view(row, step.notify)


@store_operation
def acknowledge(session: Session, violation_id: int, *, actor: str, comment: str | None = None,
                now: datetime, source: str | None = None) -> ViolationView:
    """open → acknowledged: someone is on it; repeats stop notifying."""
    return _change(session, violation_id, "acknowledge", actor=actor, comment=comment, now=now, source=source)


@store_operation
def resolve(session: Session, violation_id: int, *, actor: str, comment: str | None = None,
            now: datetime, source: str | None = None) -> ViolationView:
    """open or acknowledged → resolved; a match within the flap window reopens it."""
    return _change(session, violation_id, "resolve", actor=actor, comment=comment, now=now, source=source)


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
    return _change(session, violation_id, "reopen", actor=actor, comment=comment, now=now, source=source)


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
    violation; a flapping violation waits at least its flap window (transitions.quiet_period_s).
    """
    require_aware(now, "auto_resolve_due")
    candidates = session.scalars(
        select(ViolationRow).where(ViolationRow.status != "resolved")
        .where(ViolationRow.resolve_after_s.is_not(None) | ViolationRow.flapping
               | ViolationRow.rule_id.in_(list(quiet_by_rule)))
        .order_by(ViolationRow.id).with_for_update(key_share=True)
    )
    resolved = []
    for row in candidates:
        step = transitions.apply_quiet(_state(row), now, quiet_by_rule.get(row.rule_id))
        if step is None:
            continue
        _apply(session, row, step, actor=transitions.ENGINE_ACTOR)
        resolved.append(violation_view(row, step.notify))
    return resolved
