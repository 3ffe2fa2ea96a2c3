"""Who may use gpuslo and what they did: API tokens, users' logins and web sessions, and the audit log."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from gpuslo.engine.services.changes import utcnow
from gpuslo.engine.store import audit, credentials, web_sessions
from gpuslo.engine.store.audit import AuditEntry, AuditFilter
from gpuslo.engine.store.credentials import TokenView, UserView
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import Page

EXPORTS = {"csv": audit.export_csv, "json": audit.export_json}


class Accounts:
    """Credentials, login sessions and the audit log of one database."""

    def __init__(self, database: Database):
        self._database = database

    def any_credentials(self) -> bool:
        """Whether a user or a token was ever created (then bootstrap mode is over)."""
        with self._database.engine.execution_options(gpuslo_readonly=True).connect() as connection:
            return credentials.credentials_exist(connection)

    def find_token(self, clear: str) -> TokenView | None:
        """The live token with this clear text; None when unknown or revoked."""
        with self._database.session(readonly=True) as session:
            return credentials.find_token(session, clear)

    def user(self, name: str) -> UserView | None:
        with self._database.session(readonly=True) as session:
            return credentials.get_user(session, name)

    def session_user(self, sid: str | None, name: str, now: datetime) -> UserView | None:
        """The user of a live web session, read together; None when the session ended or is someone else's."""
        with self._database.session(readonly=True) as session:
            live = web_sessions.find(session, sid, now=now) if sid is not None else None
            return credentials.get_user(session, name) if live is not None and live.user_name == name else None

    def start_session(self, user_name: str, *, lifetime_s: float) -> str:
        """A new web session; its id (clear, kept only in the signed cookie)."""
        with self._database.session() as session:
            return web_sessions.start(session, user_name, now=utcnow(), lifetime_s=lifetime_s)

    def end_session(self, sid: str) -> None:
        with self._database.session() as session:
            web_sessions.end(session, sid, now=utcnow())

    def record_audit(self, action: str, *, actor: str, target_type: str | None = None, target_id: object = None,
                     before: Any = None, after: Any = None, source: str | None = None,
                     detail: str | None = None) -> None:
        """One audit row for an action the web layer performs itself (login, logout, a refused request)."""
        with self._database.session() as session:
            audit.record(session, at=utcnow(), actor=actor, action=action, target_type=target_type,
                         target_id=target_id, before=before, after=after, source_ip=source, detail=detail)

    def audit_page(self, filters: AuditFilter, *, page: int = 1, page_size: int = 50) -> Page[AuditEntry]:
        """A page of the audit log, newest first."""
        with self._database.session(readonly=True) as session:
            return audit.list_audit(session, filters, page=page, page_size=page_size)

    def audit_export(self, filters: AuditFilter, format: str) -> Iterator[str]:
        """The whole filtered audit log as CSV or JSON, in pieces, read in one transaction held while streaming."""
        writer = EXPORTS[format]
        with self._database.session(readonly=True) as session:
            yield from writer(audit.iter_audit(session, filters))

    def tokens(self) -> list[TokenView]:
        with self._database.session(readonly=True) as session:
            return credentials.list_tokens(session)

    def create_token(self, *, name: str, scopes: Sequence[str], actor: str,
                     source: str | None = None) -> tuple[TokenView, str]:
        """A new API token and its clear text (shown once); audited. ConfigError for a bad name or scope."""
        now = utcnow()
        with self._database.session() as session:
            token, clear = credentials.create_token(session, name=name, scopes=scopes, now=now)
            audit.record(session, at=now, actor=actor, action="token.create", target_type="token",
                         target_id=token.id, after=token.to_dict(), source_ip=source)
        return token, clear

    def revoke_token(self, token_id: int, *, actor: str, source: str | None = None) -> TokenView:
        """Revoke a token (NotFoundError when unknown); audited with its before and after."""
        now = utcnow()
        with self._database.session() as session:
            before = credentials.get_token(session, token_id)
            token = credentials.revoke_token(session, token_id, now=now)
            audit.record(session, at=now, actor=actor, action="token.revoke", target_type="token",
                         target_id=token_id, before=before.to_dict() if before else None,
                         after=token.to_dict(), source_ip=source)
        return token
