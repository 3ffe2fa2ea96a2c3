"""slo buckets: good/total requests per SLO group per minute and per hour, and bad requests charged to violations

Revision ID: 0006_slo_buckets
Revises: 0005
Create Date: 2026-12-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_slo_buckets"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _counts(table: str, unit: str) -> None:
    op.create_table(
        table,
        sa.Column("slo_id", sa.String(200), nullable=False),
        sa.Column("group_key", sa.String(512), nullable=False),
        sa.Column(unit, sa.BigInteger(), nullable=False),
        sa.Column("good", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.BigInteger(), nullable=False),
        sa.Column("attributed", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("slo_id", "group_key", unit, name=f"pk_{table}"),
    )
    # Covering indexes: the API's range sums read the index alone (bench/slo.py (b)); minutes in time order
    # (short ranges near now), hours in group order (whole windows, grouped without a sort).
    columns = ["slo_id", unit, "group_key"] if unit == "minute" else ["slo_id", "group_key", unit]
    name = f"ix_{table}_slo_id_minute" if unit == "minute" else f"ix_{table}_slo_id_group_key_hour"
    op.create_index(name, table, [*columns, "good", "total", "attributed"])


def upgrade() -> None:
    _counts("slo_buckets", "minute")
    _counts("slo_hours", "hour")
    op.create_table(
        "slo_causes",
        sa.Column("slo_id", sa.String(200), nullable=False),
        sa.Column("group_key", sa.String(512), nullable=False),
        sa.Column("minute", sa.BigInteger(), nullable=False),
        sa.Column("violation_id", sa.Integer(), nullable=False),
        sa.Column("bad", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["violation_id"], ["violations.id"], ondelete="CASCADE",
                                name="fk_slo_causes_violation_id_violations"),
        sa.PrimaryKeyConstraint("slo_id", "group_key", "minute", "violation_id", name="pk_slo_causes"),
    )
    op.create_index("ix_slo_causes_violation_id", "slo_causes", ["violation_id"])
    op.create_index("ix_slo_causes_slo_id_minute", "slo_causes", ["slo_id", "minute"])


def downgrade() -> None:
    op.drop_table("slo_causes")
    op.drop_table("slo_hours")
    op.drop_table("slo_buckets")
