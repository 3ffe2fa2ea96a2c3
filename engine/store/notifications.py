"""Reading the outbox for people: notifications with their attempts, filtered pages, and the dead-letter retry.

The outbox module (gpuslo.engine.store.outbox) serves the delivery worker; this one serves the UI, the API and
the audited retry of gpuslo.engine.services.notifications.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from gpuslo.engine.errors import InvalidTransition, NotFoundError
from gpuslo.engine.store import outbox
from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.store.outbox import AttemptView, NotificationView
from gpuslo.engine.store.outbox import _view as notification_view
from gpuslo.engine.store.outbox_models import NotificationRow
from gpuslo.engine.store.read_models import Page
from gpuslo.engine.store.rows import append_history, require_aware, store_operation

# A violation's page shows at most this many of its notifications (a flapping violation repeats for months).
VIOLATION_LIMIT = 200


@dataclass(frozen=True)
class NotificationFilter:
    """Every field optional: one status, one receiver, one violation."""

    status: str | None = None
    receiver: str | None = None
    violation_id: int | None = None


@dataclass(frozen=True)
class NotificationDetail:
    """A notification and its delivery attempts, oldest attempt first."""

    notification: NotificationView
    attempts: tuple[AttemptView, ...]


def _query(filters: NotificationFilter) -> Select[tuple[NotificationRow]]:
    query = select(NotificationRow)
    if filters.status is not None:
        query = query.where(NotificationRow.status == filters.status)
    if filters.receiver is not None:
        query = query.where(NotificationRow.receiver == filters.receiver)
    if filters.violation_id is not None:
        query = query.where(NotificationRow.violation_id == filters.violation_id)
    return query


def _with_attempts(session: Session, views: Sequence[NotificationView]) -> tuple[NotificationDetail, ...]:
    by_id: dict[int, list[AttemptView]] = {view.id: [] for view in views}
    for attempt in outbox.list_attempts(session, list(by_id)) if by_id else ():
        by_id[attempt.notification_id].append(attempt)
    return tuple(NotificationDetail(view, tuple(by_id[view.id])) for view in views)


@store_operation
def page_notifications(session: Session, filters: NotificationFilter, *, page: int = 1,
                       page_size: int = 50) -> Page[NotificationDetail]:
    """Newest first, each with its attempts."""
    if page < 1 or not 1 <= page_size <= 1000:
        raise ValueError("page must be >= 1 and page_size within 1..1000")
    query = _query(filters)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(NotificationRow.id.desc()).offset((page - 1) * page_size)
                           .limit(page_size))
    items = _with_attempts(session, [notification_view(r) for r in rows])
    return Page(items, page, page_size, total, page * page_size < total)


@store_operation
def of_violation(session: Session, violation_id: int) -> tuple[NotificationDetail, ...] | None:
    """A violation's notifications, oldest first, with their attempts; None when the violation does not exist."""
    if session.get(ViolationRow, violation_id) is None:
        return None
    views = outbox.list_notifications(session, violation_id=violation_id, limit=VIOLATION_LIMIT)
    return _with_attempts(session, views)


@store_operation
def receivers(session: Session) -> list[str]:
    """Every receiver name the outbox holds rows for (the UI's filter choices)."""
    return list(session.scalars(select(NotificationRow.receiver).distinct().order_by(NotificationRow.receiver)))


@store_operation
def get_notification(session: Session, notification_id: int) -> NotificationView | None:
    row = session.get(NotificationRow, notification_id)
    return notification_view(row) if row is not None else None


@store_operation
def get_detail(session: Session, notification_id: int) -> NotificationDetail | None:
    """One notification with its attempts; None when unknown."""
    view = get_notification(session, notification_id)
    return _with_attempts(session, [view])[0] if view is not None else None


def _fresh(notification_id: int) -> Select[tuple[NotificationRow]]:
    """The row as the database holds it now, not as the session last saw it."""
    return (select(NotificationRow).where(NotificationRow.id == notification_id)
            .execution_options(populate_existing=True))


@store_operation
def retry(session: Session, notification_id: int, now: datetime, *, actor: str,
          source: str | None = None) -> NotificationView:
    """Make a dead notification pending again, due now, and say who did in the violation's history;
    NotFoundError or InvalidTransition (409) saying why not."""
    require_aware(now, "notifications.retry")
    found = session.scalars(_fresh(notification_id)).one_or_none()
    before = notification_view(found) if found is not None else None  # a snapshot: the retry resets attempts
    if before is None or not outbox.retry_dead(session, notification_id, now):
        current = session.scalars(_fresh(notification_id)).one_or_none()
        if current is None:
            raise NotFoundError(f"No notification with id {notification_id}.")
        raise InvalidTransition(f"notification {notification_id} is {current.status}, not dead; only a dead "
                                "notification can be retried")
    append_history(session, before.violation_id, now, "notification_retried", {
        "notification_id": before.id, "receiver": before.receiver, "notification_action": before.action,
        "attempts": before.attempts}, actor=actor, source=source)
    return notification_view(session.scalars(_fresh(notification_id)).one())
