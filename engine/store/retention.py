"""Retention: prune raw events by age, keeping every event that is evidence of a violation.

Violations, evidence, history and the audit log are never pruned. Events not yet evaluated by the engine are
kept too, whatever their age, so a backlog is never lost. Deletes run in bounded batches, each its own
transaction, so a large prune never holds the write lock for long.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

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
