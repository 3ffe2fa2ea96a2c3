"""Retention: prune raw events by age, keeping every event that is evidence of a violation.

Violations, evidence and history are never pruned; the audit log only with `audit_retention_days` set, through
`prune_audit`, the one delete its guard trigger allows. Events not yet evaluated by the engine are
kept too, whatever their age, so a backlog is never lost. Deletes run in bounded batches, each its own
transaction, so a large prune never holds the write lock for long.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from gpuslo.engine.store import audit
from gpuslo.engine.store.access_models import AuditPruneGrantRow, AuditRow
from gpuslo.engine.store.models import EventRow, EvidenceRow
from gpuslo.engine.store.rows import require_aware, store_operation

BATCH = 5000


@store_operation
def prune_events_batch(session: Session, received_before: datetime, batch: int = BATCH) -> int:
    """Delete at most `batch` evaluated events received before the cutoff and cited by no evidence row."""
    require_aware(received_before, "prune_events_batch")
    cited = exists().where(EvidenceRow.event_id == EventRow.id)
    ids = list(session.scalars(
        select(EventRow.id).where(EventRow.received_at < received_before, EventRow.processed_at.is_not(None),
                                  ~cited).limit(batch)))
    if not ids:
        return 0
    # Re-check "not cited" in the DELETE itself: evidence added since the SELECT keeps its event.
    result = session.execute(delete(EventRow).where(EventRow.id.in_(ids), ~cited).execution_options(
        synchronize_session=False))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


@store_operation
def prune_audit(session: Session, older_than: datetime, now: datetime, *, actor: str = "engine") -> int:
    """Delete audit rows from before `older_than` through the one path the audit guard allows (migration 0006):
    a grant row for this transaction only, the delete, the grant removed, and an `audit.prune` row saying how
    many went. The guard refuses a cutoff less than a day old; other deletes and every update are refused."""
    require_aware(older_than, "prune_audit")
    grant = AuditPruneGrantRow(before=older_than, granted_at=now)
    session.add(grant)
    session.flush()
    result = session.execute(delete(AuditRow).where(AuditRow.at < older_than).execution_options(
        synchronize_session=False))
    session.execute(delete(AuditPruneGrantRow).where(AuditPruneGrantRow.id == grant.id))
    pruned = int(result.rowcount or 0)  # type: ignore[attr-defined]
    audit.record(session, at=now, actor=actor, action="audit.prune", target_type="audit_log",
                 detail=f"deleted {pruned} audit rows from before {older_than.isoformat()}")
    return pruned
