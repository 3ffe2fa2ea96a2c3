"""event quarantine: events.error marks an event the engine could not evaluate or store; events.time_sent keeps
the time as the client wrote it when the canonical UTC form drops something (an offset, nanoseconds)

Revision ID: 0007_quarantine
Revises: 0006_delivery_sessions
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_quarantine"
down_revision: str | None = "0006_delivery_sessions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("time_sent", sa.String(64), nullable=True))
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("error")
        batch.drop_column("time_sent")
