"""fleet partitions: the last stream sequence, watermark and absence clock each fleet partition has stored

Revision ID: 0006_fleet
Revises: 0007_quarantine
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_fleet"
down_revision: str | None = "0007_quarantine"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_partitions",
        sa.Column("partition", sa.String(200), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("watermark", sa.Float(), nullable=False),
        sa.Column("clock", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("partition", name="pk_fleet_partitions"),
    )


def downgrade() -> None:
    op.drop_table("fleet_partitions")
