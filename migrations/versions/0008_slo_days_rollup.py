"""slo days: the SLI counts rolled up per UTC day, and hours indexed in time order (the API's range pieces)

Revision ID: 0008_slo_days
Revises: 0006_fleet
Create Date: 2026-12-01 14:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_slo_days"
down_revision: str | None = "0006_fleet"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COUNTS = ["good", "total", "attributed"]


def upgrade() -> None:
    op.create_table(
        "slo_days",
        sa.Column("slo_id", sa.String(200), nullable=False),
        sa.Column("group_key", sa.String(512), nullable=False),
        sa.Column("day", sa.BigInteger(), nullable=False),
        sa.Column("good", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("attributed", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("slo_id", "group_key", "day", name="pk_slo_days"),
    )
    op.create_index("ix_slo_days_slo_id_day", "slo_days", ["slo_id", "day", "group_key", *_COUNTS])
    op.create_index("ix_slo_hours_slo_id_hour", "slo_hours", ["slo_id", "hour", "group_key", *_COUNTS])
    # Existing hours roll up into days, so stored windows read the same after the upgrade.
    op.execute("INSERT INTO slo_days (slo_id, group_key, day, good, total, attributed) "
               "SELECT slo_id, group_key, hour / 24, sum(good), sum(total), sum(attributed) FROM slo_hours "
               "GROUP BY slo_id, group_key, hour / 24")


def downgrade() -> None:
    op.drop_index("ix_slo_hours_slo_id_hour", table_name="slo_hours")
    op.drop_table("slo_days")
