"""Small before/after snapshots of audit targets, read in the action's own transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuslo.engine.store.models import SilenceRow, ViolationRow
from gpuslo.engine.store.outbox_models import NotificationRow


def violation(session: Session, violation_id: int) -> dict[str, Any] | None:
    """The fields a human action can change (None when the violation does not exist)."""
    # Locked as the action will lock it, so `before` is what the action changes (PostgreSQL; SQLite serializes).
    row = session.scalars(select(ViolationRow).where(ViolationRow.id == violation_id)
                          .with_for_update(key_share=True)).first()
    if row is None:
        return None
    return {"status": row.status, "acknowledged_by": row.acknowledged_by, "resolved_by": row.resolved_by}


def silence(session: Session, silence_id: int) -> dict[str, Any] | None:
    row = session.scalars(select(SilenceRow).where(SilenceRow.id == silence_id).with_for_update()).first()
    if row is None:
        return None
    return {"matchers": dict(row.matchers), "starts_at": row.starts_at, "ends_at": row.ends_at,
            "author": row.author, "comment": row.comment, "expired_at": row.expired_at,
            "expired_by": row.expired_by}


def notification(session: Session, notification_id: int) -> dict[str, Any] | None:
    """The delivery state a retry changes (never the payload: it is the receiver's business)."""
    row = session.scalars(select(NotificationRow).where(NotificationRow.id == notification_id)
                          .with_for_update()).first()
    if row is None:
        return None
    return {"violation_id": row.violation_id, "receiver": row.receiver, "action": row.action,
            "status": row.status, "attempts": row.attempts, "next_attempt_at": row.next_attempt_at}


def of(session: Session, target_type: str, target_id: object) -> dict[str, Any] | None:
    """The snapshot of a violation, silence or notification by id; None for other targets or an unknown id."""
    if target_id is None:
        return None
    reader = {"violation": violation, "silence": silence, "notification": notification}.get(target_type)
    return reader(session, int(str(target_id))) if reader else None
