"""notification history: violation history records notification_dead and notification_retried (action widened)

Revision ID: 0005
Revises: 0004
Create Date: 2025-01-05 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = ("created", "folded", "acknowledged", "resolved", "reopened", "commented")
_NEW = (*_OLD, "notification_dead", "notification_retried")
OLD_ACTIONS = "action IN (" + ", ".join(f"'{a}'" for a in _OLD) + ")"
NEW_ACTIONS = "action IN (" + ", ".join(f"'{a}'" for a in _NEW) + ")"
CHECK = "ck_violation_history_action"
# "notification_retried" is 20 characters: the column grows from 16.
OLD_LENGTH, NEW_LENGTH = 16, 32


def _history_table(check: str, length: int) -> sa.Table:
    """violation_history as 0002 left it: SQLite rebuilds it from this rather than from reflection."""
    return sa.Table(
        "violation_history", sa.MetaData(),
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("violation_id", sa.Integer(), sa.ForeignKey("violations.id", ondelete="CASCADE",
                                                              name="fk_violation_history_violation_id_violations"),
                  nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(length), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("status_before", sa.String(16), nullable=True),
        sa.Column("status_after", sa.String(16), nullable=True),
        sa.Column("source", sa.String(64), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.CheckConstraint(check, name=CHECK),
        sa.Index("ix_violation_history_violation_id_at", "violation_id", "at"),
    )


def _change(check: str, length: int, new_check: str, new_length: int) -> None:
    with op.batch_alter_table("violation_history", copy_from=_history_table(check, length)) as batch:
        batch.drop_constraint(op.f(CHECK), type_="check")
        batch.alter_column("action", existing_type=sa.String(length), type_=sa.String(new_length),
                           existing_nullable=False)
        batch.create_check_constraint(op.f(CHECK), sa.text(new_check))


def upgrade() -> None:
    _change(OLD_ACTIONS, OLD_LENGTH, NEW_ACTIONS, NEW_LENGTH)


def downgrade() -> None:
    # The old constraint cannot hold these lines; the attempts and the audit log still tell the story.
    op.execute("DELETE FROM violation_history WHERE action IN ('notification_dead', 'notification_retried')")
    _change(NEW_ACTIONS, NEW_LENGTH, OLD_ACTIONS, OLD_LENGTH)
