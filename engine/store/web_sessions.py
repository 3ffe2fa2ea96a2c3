"""Login sessions held server-side: start one at login, look it up on every request, end it at logout.

The cookie carries a random session id; only its sha256 is stored (like API tokens). Ending a session is a
row update, so a cookie copied before a logout, a password change or a disable is refused from then on.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpuslo.engine.access import hash_token
from gpuslo.engine.store.access_models import WebSessionRow
from gpuslo.engine.store.rows import require_aware, store_operation

END_REASONS = ("logout", "password_changed", "user_disabled", "user_deleted")


@dataclass(frozen=True)
class WebSession:
    id: int
    user_name: str
    created_at: datetime
    expires_at: datetime


@store_operation
def start(session: Session, user_name: str, *, now: datetime, lifetime_s: float) -> str:
    """A new session for `user_name`; returns the clear session id for the cookie (never stored)."""
    require_aware(now, "web_sessions.start")
    clear = secrets.token_urlsafe(32)
    session.add(WebSessionRow(sid_hash=hash_token(clear), user_name=user_name, created_at=now,
                              expires_at=now + timedelta(seconds=lifetime_s), ended_at=None, end_reason=None))
    session.flush()
    return clear


@store_operation
def find(session: Session, clear: str, *, now: datetime) -> WebSession | None:
    """The live (not ended, not expired) session with this id, else None."""
    row = session.scalars(select(WebSessionRow).where(
        WebSessionRow.sid_hash == hash_token(clear), WebSessionRow.ended_at.is_(None),
        WebSessionRow.expires_at > now)).first()
    return WebSession(row.id, row.user_name, row.created_at, row.expires_at) if row else None


@store_operation
def end(session: Session, clear: str, *, now: datetime, reason: str = "logout") -> bool:
    """End one session; False when it was unknown or already ended."""
    result = session.execute(update(WebSessionRow).where(
        WebSessionRow.sid_hash == hash_token(clear), WebSessionRow.ended_at.is_(None))
        .values(ended_at=now, end_reason=reason))
    return bool(result.rowcount)  # type: ignore[attr-defined]


@store_operation
def end_all(session: Session, user_name: str, *, now: datetime, reason: str) -> int:
    """End every live session of a user (password changed, disabled); how many were ended."""
    if reason not in END_REASONS:
        raise ValueError(f"unknown session end reason {reason!r}")
    result = session.execute(update(WebSessionRow).where(
        WebSessionRow.user_name == user_name, WebSessionRow.ended_at.is_(None))
        .values(ended_at=now, end_reason=reason))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


@store_operation
def prune(session: Session, *, before: datetime) -> int:
    """Forget sessions that expired or ended before `before` (the retention job)."""
    from sqlalchemy import delete, or_

    result = session.execute(delete(WebSessionRow).where(
        or_(WebSessionRow.expires_at < before, WebSessionRow.ended_at < before)))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
