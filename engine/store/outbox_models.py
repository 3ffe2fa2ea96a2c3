"""Tables of the notification outbox: one row per message to one receiver, and one per delivery attempt."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpuslo.engine.store.models import Base

NOTIFICATION_STATUSES = ("pending", "delivering", "delivered", "dead", "suppressed")
NOTIFICATION_ACTIONS = ("trigger", "acknowledge", "resolve")
ATTEMPT_STATUSES = ("delivered", "retry", "dead")
NOTIFICATION_STATUS_CHECK = "status IN ('pending', 'delivering', 'delivered', 'dead', 'suppressed')"
NOTIFICATION_ACTION_CHECK = "action IN ('trigger', 'acknowledge', 'resolve')"
ATTEMPT_STATUS_CHECK = "status IN ('delivered', 'retry', 'dead')"


class NotificationRow(Base):
    """A message for one receiver, written in the transaction of the change that caused it."""

    __tablename__ = "notifications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    violation_id: Mapped[int] = mapped_column(ForeignKey("violations.id", ondelete="CASCADE"))
    receiver: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(16))
    dedup_key: Mapped[str] = mapped_column(String(200))
    payload: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime]
    lease_until: Mapped[datetime | None]
    created_at: Mapped[datetime]
    delivered_at: Mapped[datetime | None]
    suppressed_reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(NOTIFICATION_STATUS_CHECK, name="status"),
        CheckConstraint(NOTIFICATION_ACTION_CHECK, name="action"),
        Index("ix_notifications_status_next_attempt_at", "status", "next_attempt_at"),
        Index("ix_notifications_receiver_dedup_key_id", "receiver", "dedup_key", "id"),
        Index("ix_notifications_violation_id", "violation_id"),
    )


class DeliveryAttemptRow(Base):
    """One try at sending a notification: outcome, latency, HTTP status and the (secret-free) error."""

    __tablename__ = "delivery_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    notification_id: Mapped[int] = mapped_column(ForeignKey("notifications.id", ondelete="CASCADE"))
    at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(16))
    latency_ms: Mapped[int] = mapped_column(Integer)
    response_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(ATTEMPT_STATUS_CHECK, name="status"),
        Index("ix_delivery_attempts_notification_id_at", "notification_id", "at"),
    )


class ReceiverStateRow(Base):
    """Health of one receiver as delivery saw it; `disabled_at` set (410 Gone) stops delivery until re-enabled."""

    __tablename__ = "receiver_states"

    receiver: Mapped[str] = mapped_column(String(200), primary_key=True)
    disabled_at: Mapped[datetime | None]
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    last_success_at: Mapped[datetime | None]
    last_failure_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(Text)
