"""server-side sessions, receiver health, and an append-only audit log guarded by triggers

Revision ID: 0006_delivery_sessions
Revises: 0006_slo_buckets
Create Date: 2026-12-01 00:00:00

The audit log refuses UPDATE (and TRUNCATE on PostgreSQL) always, and DELETE of a row unless a row of
audit_prune_grants covering its time exists: the audit retention prune (gpuslo.engine.store.retention) inserts
one in its own transaction, deletes, removes it and records an `audit.prune` row. A grant may only cover rows
older than one day.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_delivery_sessions"
down_revision: str | None = "0006_slo_buckets"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPDATE_REFUSED = "audit_log is append-only: rows cannot be updated"
DELETE_REFUSED = "audit_log is append-only: rows are deleted only by the audit retention prune"
GRANT_REFUSED = "audit_prune_grants: a prune may only cover audit rows older than one day"

SQLITE_TRIGGERS = (
    f"""CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
    BEGIN SELECT RAISE(ABORT, '{UPDATE_REFUSED}'); END""",
    f"""CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
    WHEN NOT EXISTS (SELECT 1 FROM audit_prune_grants g WHERE OLD.at < g.before)
    BEGIN SELECT RAISE(ABORT, '{DELETE_REFUSED}'); END""",
    f"""CREATE TRIGGER audit_prune_grants_bound BEFORE INSERT ON audit_prune_grants
    WHEN NEW.before > strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 day')
    BEGIN SELECT RAISE(ABORT, '{GRANT_REFUSED}'); END""",
)
POSTGRES_TRIGGERS = (
    f"""CREATE FUNCTION gpuslo_audit_guard() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            RAISE EXCEPTION '{UPDATE_REFUSED}' USING ERRCODE = 'insufficient_privilege';
        ELSIF TG_OP = 'TRUNCATE' THEN
            RAISE EXCEPTION '{DELETE_REFUSED}' USING ERRCODE = 'insufficient_privilege';
        ELSIF NOT EXISTS (SELECT 1 FROM audit_prune_grants g WHERE OLD.at < g.before) THEN
            RAISE EXCEPTION '{DELETE_REFUSED}' USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN OLD;
    END $$""",
    """CREATE TRIGGER audit_log_guard BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION gpuslo_audit_guard()""",
    """CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION gpuslo_audit_guard()""",
    f"""CREATE FUNCTION gpuslo_audit_grant_bound() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.before > now() - interval '1 day' THEN
            RAISE EXCEPTION '{GRANT_REFUSED}' USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER audit_prune_grants_bound BEFORE INSERT ON audit_prune_grants
    FOR EACH ROW EXECUTE FUNCTION gpuslo_audit_grant_bound()""",
)
SQLITE_DROPS = ("DROP TRIGGER IF EXISTS audit_prune_grants_bound", "DROP TRIGGER IF EXISTS audit_log_no_delete",
                "DROP TRIGGER IF EXISTS audit_log_no_update")
POSTGRES_DROPS = ("DROP TRIGGER IF EXISTS audit_prune_grants_bound ON audit_prune_grants",
                  "DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log",
                  "DROP TRIGGER IF EXISTS audit_log_guard ON audit_log",
                  "DROP FUNCTION IF EXISTS gpuslo_audit_grant_bound()", "DROP FUNCTION IF EXISTS gpuslo_audit_guard()")


def _time(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sid_hash", sa.String(64), nullable=False),
        sa.Column("user_name", sa.String(200), nullable=False),
        _time("created_at"),
        _time("expires_at"),
        _time("ended_at", nullable=True),
        sa.Column("end_reason", sa.String(32), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_web_sessions"),
        sa.UniqueConstraint("sid_hash", name="uq_web_sessions_sid_hash"),
    )
    op.create_index("ix_web_sessions_user_name", "web_sessions", ["user_name"])
    op.create_table(
        "receiver_states",
        sa.Column("receiver", sa.String(200), nullable=False),
        _time("disabled_at", nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        _time("last_success_at", nullable=True),
        _time("last_failure_at", nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("receiver", name="pk_receiver_states"),
    )
    op.create_table(
        "audit_prune_grants",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        _time("before"),
        _time("granted_at"),
        sa.PrimaryKeyConstraint("id", name="pk_audit_prune_grants"),
    )
    for statement in POSTGRES_TRIGGERS if op.get_context().dialect.name == "postgresql" else SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    for statement in POSTGRES_DROPS if op.get_context().dialect.name == "postgresql" else SQLITE_DROPS:
        op.execute(statement)
    op.drop_table("audit_prune_grants")
    op.drop_table("receiver_states")
    op.drop_index("ix_web_sessions_user_name", table_name="web_sessions")
    op.drop_table("web_sessions")
