"""The notification outbox: enqueue in the caller's transaction, claim with a lease, record every attempt.

Claiming uses `SELECT ... FOR UPDATE SKIP LOCKED` on PostgreSQL so several workers share the queue; SQLite
ignores the locking clause and its `BEGIN IMMEDIATE` writer lock makes claims serial (one writer).
A row is claimable only when no earlier row for the same receiver and dedup key is still pending, delivering
or dead: so a resolve never overtakes its trigger.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from sqlalchemy import Integer, Select, String, and_, bindparam, exists, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from gpuslo.engine.store.models import UTCDateTime, ViolationRow
from gpuslo.engine.store.outbox_models import DeliveryAttemptRow, NotificationRow, ReceiverStateRow
from gpuslo.engine.store.rows import append_history, store_operation

UNFINISHED = ("pending", "delivering", "dead")
ERROR_LIMIT = 1000


@dataclass(frozen=True)
class NotificationView:
    """An outbox row as the UI and the worker see it."""

    id: int
    violation_id: int
    receiver: str
    action: str
    dedup_key: str
    payload: Mapping[str, Any]
    status: str
    attempts: int
    next_attempt_at: datetime
    lease_until: datetime | None
    created_at: datetime
    delivered_at: datetime | None
    suppressed_reason: str | None


@dataclass(frozen=True)
class AttemptView:
    """One delivery attempt."""

    id: int
    notification_id: int
    at: datetime
    status: str
    latency_ms: int
    response_code: int | None
    error: str | None


@dataclass(frozen=True)
class Attempt:
    """What the worker saw when it sent: `status` delivered, retry or dead."""

    status: str
    latency_ms: int
    response_code: int | None = None
    error: str | None = None


def _view(row: NotificationRow) -> NotificationView:
    return NotificationView(
        row.id, row.violation_id, row.receiver, row.action, row.dedup_key, MappingProxyType(dict(row.payload)),
        row.status, row.attempts, row.next_attempt_at, row.lease_until, row.created_at, row.delivered_at,
        row.suppressed_reason)


@store_operation
def enqueue(session: Session, *, violation_id: int, receiver: str, action: str, dedup_key: str,
            payload: dict[str, Any], now: datetime, not_before: datetime | None = None,
            suppressed_reason: str | None = None) -> int:
    """Add a notification (pending, or suppressed with its reason) in the caller's transaction; its id."""
    row = add(session, violation_id=violation_id, receiver=receiver, action=action, dedup_key=dedup_key,
              payload=payload, now=now, not_before=not_before, suppressed_reason=suppressed_reason)
    session.flush()
    return row.id


def add(session: Session, *, violation_id: int, receiver: str, action: str, dedup_key: str,
        payload: dict[str, Any], now: datetime, not_before: datetime | None = None,
        suppressed_reason: str | None = None) -> NotificationRow:
    """`enqueue` without writing the row yet: the session's next flush (its next query, its savepoint's end or
    its commit) writes it, with every other row added meanwhile in one INSERT."""
    row = NotificationRow(
        violation_id=violation_id, receiver=receiver, action=action, dedup_key=dedup_key, payload=payload,
        status="suppressed" if suppressed_reason else "pending", attempts=0,
        next_attempt_at=not_before or now, lease_until=None, created_at=now, delivered_at=None,
        suppressed_reason=suppressed_reason)
    session.add(row)
    return row


@store_operation
def ids_of(session: Session, rows: Sequence[NotificationRow]) -> list[int]:
    """The ids of rows `add` made (writing them first)."""
    if rows:
        session.flush()
    return [row.id for row in rows]


@store_operation
def last_trigger_at(session: Session, receiver: str, dedup_key: str, *, include_suppressed: bool) -> datetime | None:
    """When the latest trigger for this receiver and key was enqueued (suppressed ones only if asked)."""
    statuses = ["pending", "delivering", "delivered", "dead"] + (["suppressed"] if include_suppressed else [])
    return session.scalar(
        select(func.max(NotificationRow.created_at)).where(
            NotificationRow.receiver == receiver, NotificationRow.dedup_key == dedup_key,
            NotificationRow.action == "trigger", NotificationRow.status.in_(statuses)))


@store_operation
def triggered_receivers(session: Session, dedup_key: str) -> list[str]:
    """Receivers that were sent (or are about to be sent) a trigger for this key: they get its resolve."""
    return list(session.scalars(
        select(NotificationRow.receiver).where(
            NotificationRow.dedup_key == dedup_key, NotificationRow.action == "trigger",
            NotificationRow.status.in_(("pending", "delivering", "delivered", "dead")))
        .distinct().order_by(NotificationRow.receiver)))


@store_operation
def active_violation_fields(session: Session, host: str | None) -> list[dict[str, Any]]:
    """Match fields of unresolved violations (on `host` when given): the sources inhibition rules look at."""
    query = select(ViolationRow).where(ViolationRow.status != "resolved")
    if host is not None:
        query = query.where(ViolationRow.host == host)
    return [{"violation_id": r.id, "severity": r.severity, "slo": r.slo, "rule": r.rule_id, "host": r.host,
             "gpu": r.gpu, "labels": dict(r.labels), "group": dict(r.group)}
            for r in session.scalars(query.limit(1000))]


@functools.lru_cache(maxsize=32)
def _claim_query(by_receiver: bool, not_in: tuple[str, ...] | None) -> Select[tuple[int]]:
    """The claim's SELECT, built once per shape (the dispatcher runs it per receiver twice a second); `now`,
    `receiver` and `limit` are bound at execution."""
    row, earlier = NotificationRow, aliased(NotificationRow)
    now = bindparam("now", type_=UTCDateTime())
    blocked = exists().where(earlier.receiver == row.receiver, earlier.dedup_key == row.dedup_key,
                             earlier.id < row.id, earlier.status.in_(UNFINISHED))
    due = or_(and_(row.status == "pending", row.next_attempt_at <= now),
              and_(row.status == "delivering", row.lease_until < now))
    # A receiver disabled by a 410 Gone gets nothing, whichever worker claims and however stale its view is.
    disabled = select(ReceiverStateRow.receiver).where(ReceiverStateRow.disabled_at.is_not(None))
    query = select(row.id).where(due, ~blocked, row.receiver.not_in(disabled))
    if by_receiver:
        query = query.where(row.receiver == bindparam("receiver", type_=String()))
    if not_in is not None:
        query = query.where(row.receiver.not_in(list(not_in)))
    return (query.order_by(row.next_attempt_at, row.id).limit(bindparam("limit", type_=Integer()))
            .with_for_update(skip_locked=True, of=row))


@store_operation
def claim(session: Session, now: datetime, *, lease_s: float, limit: int, receiver: str | None = None,
          not_in: Sequence[str] | None = None) -> list[NotificationView]:
    """Take up to `limit` due rows (pending, or delivering with an expired lease) and lease them to the caller;
    only `receiver`'s rows when given (a receiver's delivery lane), or only rows of receivers not in `not_in`."""
    row = NotificationRow
    query = _claim_query(receiver is not None, tuple(sorted(not_in)) if not_in is not None else None)
    params: dict[str, Any] = {"now": now, "limit": limit}
    if receiver is not None:
        params["receiver"] = receiver
    ids = list(session.scalars(query, params))
    if not ids:
        return []
    lease_until = now + timedelta(seconds=lease_s)
    session.execute(update(row).where(row.id.in_(ids))
                    .values(status="delivering", lease_until=lease_until, attempts=row.attempts + 1))
    session.flush()
    rows = session.scalars(select(row).where(row.id.in_(ids)).order_by(row.id).execution_options(
        populate_existing=True))
    return [_view(r) for r in rows]


@store_operation
def finish(session: Session, claimed: NotificationView, attempt: Attempt, now: datetime,
           retry_at: datetime | None = None) -> bool:
    """Record the attempt and move the row on (delivered, pending until `retry_at`, or dead).

    False when the lease was lost to another worker meanwhile: the attempt is still recorded, the row is theirs.
    """
    error = attempt.error[:ERROR_LIMIT] if attempt.error else None
    session.add(DeliveryAttemptRow(notification_id=claimed.id, at=now, status=attempt.status,
                                   latency_ms=attempt.latency_ms, response_code=attempt.response_code, error=error))
    values: dict[str, Any] = {"lease_until": None}
    if attempt.status == "delivered":
        values.update(status="delivered", delivered_at=now)
    elif attempt.status == "retry":
        values.update(status="pending", next_attempt_at=retry_at or now)
    else:
        values.update(status="dead")
    result = session.execute(update(NotificationRow).where(
        NotificationRow.id == claimed.id, NotificationRow.status == "delivering",
        NotificationRow.lease_until == claimed.lease_until).values(**values))
    return bool(result.rowcount)  # type: ignore[attr-defined]


@store_operation
def record_dead(session: Session, claimed: NotificationView, *, response_code: int | None, error: str | None,
                now: datetime) -> None:
    """Tell the violation's history that delivery of `claimed` gave up; `error` as people may see it."""
    append_history(session, claimed.violation_id, now, "notification_dead", {
        "notification_id": claimed.id, "receiver": claimed.receiver, "notification_action": claimed.action,
        "attempts": claimed.attempts, "response_code": response_code,
        "error": error[:ERROR_LIMIT] if error else None})


@store_operation
def expire_stale(session: Session, now: datetime, *, created_before: datetime, limit: int = 100,
                 error: str) -> list[NotificationView]:
    """Make dead the waiting rows (pending, or delivering with a lapsed lease) created before the cutoff: past
    the maximum age a page is noise. Each gets a dead attempt with `error`; returns them as they are now."""
    row = NotificationRow
    waiting = or_(row.status == "pending", and_(row.status == "delivering", row.lease_until < now))
    ids = list(session.scalars(select(row.id).where(waiting, row.created_at < created_before)
                               .order_by(row.id).limit(limit).with_for_update(skip_locked=True, of=row)))
    if not ids:
        return []
    session.execute(update(row).where(row.id.in_(ids)).values(status="dead", lease_until=None))
    for notification_id in ids:
        session.add(DeliveryAttemptRow(notification_id=notification_id, at=now, status="dead", latency_ms=0,
                                       response_code=None, error=error[:ERROR_LIMIT]))
    session.flush()
    rows = session.scalars(select(row).where(row.id.in_(ids)).order_by(row.id).execution_options(
        populate_existing=True))
    return [_view(r) for r in rows]


@store_operation
def forward_dead(session: Session, dead: NotificationView, secondary: str, now: datetime) -> int | None:
    """A copy of a dead notification for the secondary (dead-letter) receiver, in the transaction that made it
    dead, so it is forwarded exactly once per death; None for the secondary's own rows (no loop)."""
    if dead.receiver == secondary:
        return None
    payload = dict(dead.payload)
    payload["dead_letter"] = {"receiver": dead.receiver, "notification_id": dead.id, "attempts": dead.attempts}
    payload["summary"] = f"[not delivered to {dead.receiver}] {payload.get('summary', '')}"
    return enqueue(session, violation_id=dead.violation_id, receiver=secondary, action=dead.action,
                   dedup_key=dead.dedup_key, payload=payload, now=now)


@store_operation
def postpone(session: Session, claimed: NotificationView, until: datetime) -> None:
    """Give a claimed row back unsent (rate limit): pending again, the claim not counted as an attempt."""
    session.execute(update(NotificationRow).where(
        NotificationRow.id == claimed.id, NotificationRow.lease_until == claimed.lease_until)
        .values(status="pending", next_attempt_at=until, lease_until=None, attempts=NotificationRow.attempts - 1))


@store_operation
def retry_dead(session: Session, notification_id: int, now: datetime) -> bool:
    """Send a dead notification again from a fresh attempt count; False when it is not dead."""
    result = session.execute(update(NotificationRow).where(
        NotificationRow.id == notification_id, NotificationRow.status == "dead")
        .values(status="pending", attempts=0, next_attempt_at=now, lease_until=None))
    return bool(result.rowcount)  # type: ignore[attr-defined]


@store_operation
def list_notifications(session: Session, *, violation_id: int | None = None, status: str | None = None,
                       limit: int = 500) -> list[NotificationView]:
    """Outbox rows, oldest first, optionally of one violation or in one status."""
    query = select(NotificationRow)
    if violation_id is not None:
        query = query.where(NotificationRow.violation_id == violation_id)
    if status is not None:
        query = query.where(NotificationRow.status == status)
    return [_view(r) for r in session.scalars(query.order_by(NotificationRow.id).limit(limit))]


@store_operation
def list_attempts(session: Session, notification_ids: Sequence[int]) -> list[AttemptView]:
    """Attempts of these notifications, in time order."""
    rows = session.scalars(select(DeliveryAttemptRow).where(DeliveryAttemptRow.notification_id.in_(
        list(notification_ids))).order_by(DeliveryAttemptRow.at, DeliveryAttemptRow.id))
    return [AttemptView(r.id, r.notification_id, r.at, r.status, r.latency_ms, r.response_code, r.error)
            for r in rows]
