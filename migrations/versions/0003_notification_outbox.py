"""notification outbox: notifications and delivery attempts

Revision ID: 0003
Revises: 0002
Create Date: 2025-01-03 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("violation_id", sa.Integer(), nullable=False),
        sa.Column("receiver", sa.String(200), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("dedup_key", sa.String(200), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _time("next_attempt_at"),
        _time("lease_until", nullable=True),
        _time("created_at"),
        _time("delivered_at", nullable=True),
        sa.Column("suppressed_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notifications"),
        sa.ForeignKeyConstraint(["violation_id"], ["violations.id"], ondelete="CASCADE",
                                name="fk_notifications_violation_id_violations"),
        sa.CheckConstraint("status IN ('pending', 'delivering', 'delivered', 'dead', 'suppressed')",
                           name="ck_notifications_status"),
        sa.CheckConstraint("action IN ('trigger', 'acknowledge', 'resolve')", name="ck_notifications_action"),
    )
    op.create_index("ix_notifications_status_next_attempt_at", "notifications", ["status", "next_attempt_at"])
    op.create_index("ix_notifications_receiver_dedup_key_id", "notifications", ["receiver", "dedup_key", "id"])
    op.create_index("ix_notifications_violation_id", "notifications", ["violation_id"])

    op.create_table(
        "delivery_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("notification_id", sa.Integer(), nullable=False),
        _time("at"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("response_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_delivery_attempts"),
        sa.ForeignKeyConstraint(["notification_id"], ["notifications.id"], ondelete="CASCADE",
                                name="fk_delivery_attempts_notification_id_notifications"),
        sa.CheckConstraint("status IN ('delivered', 'retry', 'dead')", name="ck_delivery_attempts_status"),
    )
    op.create_index("ix_delivery_attempts_notification_id_at", "delivery_attempts", ["notification_id", "at"])


def downgrade() -> None:
    op.drop_table("delivery_attempts")
    op.drop_table("notifications")
