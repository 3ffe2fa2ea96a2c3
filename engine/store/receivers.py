"""Receiver health as delivery saw it: last success and failure, the 410 disable, and the queue per receiver.

One row per receiver in `receiver_states`, made on first use (an insert that ignores a concurrent twin, so two
workers on PostgreSQL never collide). A disabled receiver's notifications stay pending until an operator
re-enables it (gpuslo.engine.services.notifications, audited) or they pass the maximum age.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from gpuslo.engine.errors import InvalidTransition, NotFoundError
from gpuslo.engine.store.outbox_models import NotificationRow, ReceiverStateRow
from gpuslo.engine.store.rows import store_operation

ERROR_LIMIT = 1000
QUEUED = ("pending", "delivering")


@dataclass(frozen=True)
class ReceiverHealth:
    """What the notifications page and /metrics show of one receiver."""

    receiver: str
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None
    last_error: str | None = None
    pending: int = 0
    delivering: int = 0
    dead: int = 0

    @property
    def queued(self) -> int:
        return self.pending + self.delivering

    def to_dict(self) -> dict[str, Any]:
        return {"receiver": self.receiver, "disabled": self.disabled_at is not None,
                "disabled_at": self.disabled_at, "disabled_reason": self.disabled_reason,
                "last_success_at": self.last_success_at, "last_failure_at": self.last_failure_at,
                "last_error": self.last_error, "pending": self.pending, "delivering": self.delivering,
                "dead": self.dead}


def _ensure(session: Session, receiver: str) -> None:
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(ReceiverStateRow).values(receiver=receiver).on_conflict_do_nothing(
        index_elements=["receiver"]))


@store_operation
def note_success(session: Session, receiver: str, now: datetime) -> None:
    _ensure(session, receiver)
    session.execute(update(ReceiverStateRow).where(ReceiverStateRow.receiver == receiver)
                    .values(last_success_at=now))


@store_operation
def note_failure(session: Session, receiver: str, now: datetime, error: str | None) -> None:
    _ensure(session, receiver)
    session.execute(update(ReceiverStateRow).where(ReceiverStateRow.receiver == receiver)
                    .values(last_failure_at=now, last_error=(error or "")[:ERROR_LIMIT] or None))


@store_operation
def disable(session: Session, receiver: str, now: datetime, reason: str) -> bool:
    """Disable a receiver (410 Gone); False when it already was."""
    _ensure(session, receiver)
    result = session.execute(update(ReceiverStateRow).where(
        ReceiverStateRow.receiver == receiver, ReceiverStateRow.disabled_at.is_(None))
        .values(disabled_at=now, disabled_reason=reason[:ERROR_LIMIT]))
    return bool(result.rowcount)  # type: ignore[attr-defined]


@store_operation
def enable(session: Session, receiver: str) -> tuple[ReceiverHealth, ReceiverHealth]:
    """Re-enable a disabled receiver; (before, after). NotFoundError when unknown, InvalidTransition when enabled."""
    row = session.scalars(select(ReceiverStateRow).where(ReceiverStateRow.receiver == receiver)
                          .with_for_update()).first()
    if row is None:
        raise NotFoundError(f"no receiver named {receiver!r} has delivery state")
    before = _health(row)
    if row.disabled_at is None:
        raise InvalidTransition(f"receiver {receiver!r} is not disabled")
    row.disabled_at, row.disabled_reason = None, None
    session.flush()
    return before, _health(row)


@store_operation
def disabled(session: Session) -> set[str]:
    """Names of the disabled receivers."""
    return set(session.scalars(select(ReceiverStateRow.receiver).where(ReceiverStateRow.disabled_at.is_not(None))))


def _health(row: ReceiverStateRow, counts: dict[str, int] | None = None) -> ReceiverHealth:
    counts = counts or {}
    return ReceiverHealth(row.receiver, row.disabled_at, row.disabled_reason, row.last_success_at,
                          row.last_failure_at, row.last_error, counts.get("pending", 0),
                          counts.get("delivering", 0), counts.get("dead", 0))


@store_operation
def queue_counts(session: Session) -> dict[str, dict[str, int]]:
    """receiver → {pending, delivering, dead}: one grouped count over the outbox."""
    found: dict[str, dict[str, int]] = {}
    rows = session.execute(select(NotificationRow.receiver, NotificationRow.status, func.count())
                           .where(NotificationRow.status.in_((*QUEUED, "dead")))
                           .group_by(NotificationRow.receiver, NotificationRow.status))
    for receiver, status, count in rows:
        found.setdefault(receiver, {})[status] = int(count)
    return found


@store_operation
def health(session: Session, configured: Iterable[str] = ()) -> list[ReceiverHealth]:
    """Every configured receiver and every one with state or queued rows, by name."""
    counts = queue_counts(session)
    states = {r.receiver: r for r in session.scalars(select(ReceiverStateRow))}
    names = sorted(set(configured) | set(states) | set(counts))
    return [_health(states[n], counts.get(n)) if n in states else ReceiverHealth(
        n, pending=counts.get(n, {}).get("pending", 0), delivering=counts.get(n, {}).get("delivering", 0),
        dead=counts.get(n, {}).get("dead", 0)) for n in names]
