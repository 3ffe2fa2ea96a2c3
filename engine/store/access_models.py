"""Tables of access control and audit: users, API tokens (hashed) and the append-only audit log (migration 0004)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, CheckConstraint, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gpuslo.engine.store.models import Base

ROLE_CHECK = "role IN ('viewer', 'operator', 'admin')"


class UserRow(Base):
    """A human who logs in; only a password hash (werkzeug scrypt/pbkdf2) is stored."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    password_hash: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime]
    disabled_at: Mapped[datetime | None]

    __table_args__ = (CheckConstraint(ROLE_CHECK, name="role"),)


class ApiTokenRow(Base):
    """An API token: the sha256 of the clear token (shown once at creation), its scopes and its state."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the first characters, to recognise a token in a list
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class AuditRow(Base):
    """One human or API action; rows are only ever inserted. Triggers (migration 0006) refuse updates and deletes
    except the audited prune of gpuslo.engine.store.retention.prune_audit."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    target_type: Mapped[str | None] = mapped_column(String(64))
    target_id: Mapped[str | None] = mapped_column(String(200))
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    source_ip: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("ix_audit_log_at", "at"),
        Index("ix_audit_log_actor_at", "actor", "at"),
        Index("ix_audit_log_action_at", "action", "at"),
        Index("ix_audit_log_target_type_target_id", "target_type", "target_id"),
    )


class WebSessionRow(Base):
    """A login session held server-side (migration 0006): the cookie carries only a random id, stored hashed.

    Logout ends the row, a password change or disabling ends every row of the user: a copied cookie stops working.
    """

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sid_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    end_reason: Mapped[str | None] = mapped_column(String(32))

    __table_args__ = (Index("ix_web_sessions_user_name", "user_name"),)


class AuditPruneGrantRow(Base):
    """Leave for the audit retention prune to delete audit rows older than `before` (migration 0006's trigger).

    Inserted and deleted inside the prune's own transaction, so no other transaction ever sees one.
    """

    __tablename__ = "audit_prune_grants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    before: Mapped[datetime]
    granted_at: Mapped[datetime]
