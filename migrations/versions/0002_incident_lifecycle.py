"""incident lifecycle: acknowledge/resolve/flap/notify columns, audited history, silences

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-02 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_ACTIONS = "action IN ('created', 'folded', 'acknowledged', 'resolved', 'reopened')"
NEW_ACTIONS = "action IN ('created', 'folded', 'acknowledged', 'resolved', 'reopened', 'commented')"
_HISTORY_COLUMNS = ("status_before", "status_after", "source", "comment")
# 0001 passed a full name through the naming convention, which prefixed it again; the models' name is the short one.
OLD_CHECK = "ck_violation_history_ck_violation_history_action"
NEW_CHECK = "ck_violation_history_action"


def _time(name: str, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _history_table(check: str, name: str) -> sa.Table:
    """violation_history as 0001 made it: SQLite rebuilds it from this rather than from reflection."""
    return sa.Table(
        "violation_history", sa.MetaData(),
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("violation_id", sa.Integer(), sa.ForeignKey("violations.id", ondelete="CASCADE",
                                                              name="fk_violation_history_violation_id_violations"),
                  nullable=False),
        _time("at", nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.CheckConstraint(check, name=name),
        sa.Index("ix_violation_history_violation_id_at", "violation_id", "at"),
    )


def upgrade() -> None:
    # Plain ADD COLUMNs (no table rebuild), so the partial unique index of 0001 stays as it is on SQLite.
    op.add_column("violations", _time("quiet_since"))
    op.add_column("violations", _time("last_notified_at"))
    op.add_column("violations", _time("acknowledged_at"))
    op.add_column("violations", sa.Column("acknowledged_by", sa.String(200), nullable=True))
    op.add_column("violations", _time("resolved_at"))
    op.add_column("violations", sa.Column("resolved_by", sa.String(200), nullable=True))
    op.add_column("violations", sa.Column("flaps", sa.Integer(), server_default=sa.text("0"), nullable=False))
    op.add_column("violations", sa.Column("flapping", sa.Boolean(), server_default=sa.text("false"),
                                          nullable=False))
    op.add_column("violations", sa.Column("repeat_interval_s", sa.Float(), server_default=sa.text("14400"),
                                          nullable=False))
    op.add_column("violations", sa.Column("flap_window_s", sa.Float(), server_default=sa.text("600"),
                                          nullable=False))
    op.add_column("violations", sa.Column("resolve_after_s", sa.Float(), nullable=True))
    # Existing violations: quiet since their last change, notified when they were created, resolved when
    # they last changed (the best the old rows know).
    op.execute("UPDATE violations SET quiet_since = updated_at, last_notified_at = created_at")
    op.execute("UPDATE violations SET resolved_at = updated_at WHERE status = 'resolved'")
    op.create_index("ix_violations_rule_id_group_key_resolved_at", "violations",
                    ["rule_id", "group_key", "resolved_at"])

    with op.batch_alter_table("violation_history", copy_from=_history_table(OLD_ACTIONS, OLD_CHECK)) as batch:
        batch.add_column(sa.Column("status_before", sa.String(16), nullable=True))
        batch.add_column(sa.Column("status_after", sa.String(16), nullable=True))
        batch.add_column(sa.Column("source", sa.String(64), nullable=True))
        batch.add_column(sa.Column("comment", sa.Text(), nullable=True))
        batch.drop_constraint(op.f(OLD_CHECK), type_="check")
        batch.create_check_constraint(op.f(NEW_CHECK), sa.text(NEW_ACTIONS))

    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        _time("starts_at", nullable=False),
        _time("ends_at", nullable=False),
        sa.Column("author", sa.String(200), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        _time("created_at", nullable=False),
        _time("expired_at"),
        sa.Column("expired_by", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_silences"),
    )
    op.create_index("ix_silences_expired_at_ends_at", "silences", ["expired_at", "ends_at"])


def downgrade() -> None:
    op.drop_table("silences")
    op.execute("DELETE FROM violation_history WHERE action = 'commented'")
    new_history = _history_table(NEW_ACTIONS, NEW_CHECK)
    for name in _HISTORY_COLUMNS:
        new_history.append_column(sa.Column(name, sa.Text(), nullable=True))
    with op.batch_alter_table("violation_history", copy_from=new_history) as batch:
        batch.drop_constraint(op.f(NEW_CHECK), type_="check")
        for name in _HISTORY_COLUMNS:
            batch.drop_column(name)
        batch.create_check_constraint(op.f(OLD_CHECK), sa.text(OLD_ACTIONS))
    op.drop_index("ix_violations_rule_id_group_key_resolved_at", table_name="violations")
    for name in ("resolve_after_s", "flap_window_s", "repeat_interval_s", "flapping", "flaps", "resolved_by",
                 "resolved_at", "acknowledged_by", "acknowledged_at", "last_notified_at", "quiet_since"):
        op.drop_column("violations", name)
