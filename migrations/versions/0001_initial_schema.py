"""initial schema: events, violations, evidence, rulebook versions, violation history

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE_WHERE = "status <> 'resolved'"
LOADED_WHERE = "error IS NULL"


def _time(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        _time("time"),
        sa.Column("host", sa.String(253), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=True),
        sa.Column("gpu_uuid", sa.String(64), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("job", sa.String(200), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("source", sa.String(64), nullable=True),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("body_hash", sa.String(64), nullable=False),
        _time("received_at"),
        _time("processed_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
    )
    op.create_index("ix_events_kind_time", "events", ["kind", "time"])
    op.create_index("ix_events_host_time", "events", ["host", "time"])
    op.create_index("ix_events_gpu", "events", ["gpu"])
    op.create_index("ix_events_processed_at", "events", ["processed_at"])

    op.create_table(
        "violations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rule_id", sa.String(200), nullable=False),
        sa.Column("rule_title", sa.Text(), nullable=False),
        sa.Column("rulebook", sa.String(200), nullable=False),
        sa.Column("rulebook_version", sa.String(64), nullable=False),
        sa.Column("rulebook_hash", sa.String(128), nullable=False),
        sa.Column("slo", sa.String(200), nullable=False),
        sa.Column("slo_objective", sa.Text(), nullable=False),
        sa.Column("severity", sa.String(32), nullable=False),
        sa.Column("group_key", sa.String(512), nullable=False),
        sa.Column("group", sa.JSON(), nullable=False),
        sa.Column("host", sa.String(253), nullable=True),
        sa.Column("gpu", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        _time("first_seen"),
        _time("last_seen"),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("remediation", sa.Text(), nullable=False),
        sa.Column("runbook", sa.Text(), nullable=True),
        sa.Column("explanation", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        _time("created_at"),
        _time("updated_at"),
        sa.PrimaryKeyConstraint("id", name="pk_violations"),
        sa.CheckConstraint("status IN ('open', 'acknowledged', 'resolved')", name="ck_violations_status"),
    )
    op.create_index(
        "ix_violations_rule_id_group_key_status", "violations", ["rule_id", "group_key", "status"]
    )
    op.create_index(
        "uq_violations_active_rule_group", "violations", ["rule_id", "group_key"], unique=True,
        sqlite_where=sa.text(ACTIVE_WHERE), postgresql_where=sa.text(ACTIVE_WHERE),
    )
    op.create_index("ix_violations_status_last_seen", "violations", ["status", "last_seen"])
    op.create_index("ix_violations_severity", "violations", ["severity"])
    op.create_index("ix_violations_host", "violations", ["host"])
    op.create_index("ix_violations_slo", "violations", ["slo"])

    op.create_table(
        "evidence",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("violation_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(128), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        _time("added_at"),
        sa.PrimaryKeyConstraint("id", name="pk_evidence"),
        sa.ForeignKeyConstraint(["violation_id"], ["violations.id"], ondelete="CASCADE",
                                name="fk_evidence_violation_id_violations"),
        sa.ForeignKeyConstraint(["event_id"], ["events.id"], ondelete="CASCADE",
                                name="fk_evidence_event_id_events"),
        sa.UniqueConstraint("violation_id", "event_id", name="uq_evidence_violation_id_event_id"),
    )
    op.create_index("ix_evidence_violation_id_position", "evidence", ["violation_id", "position"])
    op.create_index("ix_evidence_event_id", "evidence", ["event_id"])

    op.create_table(
        "rulebook_versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("content_hash", sa.String(128), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        _time("loaded_at"),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_rulebook_versions"),
    )
    op.create_index(
        "uq_rulebook_versions_name_content_hash", "rulebook_versions", ["name", "content_hash"], unique=True,
        sqlite_where=sa.text(LOADED_WHERE), postgresql_where=sa.text(LOADED_WHERE),
    )
    op.create_index("ix_rulebook_versions_loaded_at", "rulebook_versions", ["loaded_at"])

    op.create_table(
        "violation_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("violation_id", sa.Integer(), nullable=False),
        _time("at"),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_violation_history"),
        sa.ForeignKeyConstraint(["violation_id"], ["violations.id"], ondelete="CASCADE",
                                name="fk_violation_history_violation_id_violations"),
        sa.CheckConstraint(
            "action IN ('created', 'folded', 'acknowledged', 'resolved', 'reopened')",
            name="ck_violation_history_action",
        ),
    )
    op.create_index("ix_violation_history_violation_id_at", "violation_history", ["violation_id", "at"])


def downgrade() -> None:
    op.drop_table("violation_history")
    op.drop_table("rulebook_versions")
    op.drop_table("evidence")
    op.drop_table("violations")
    op.drop_table("events")
