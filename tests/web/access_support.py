"""Helpers of the access tests: an app with users and tokens of every kind, and clients acting as each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask.testing import FlaskClient

from gpuslo.engine.store import credentials, web_sessions

NOW = datetime(2025, 1, 2, tzinfo=UTC)
# A fixed cheap hash: the matrix never logs in with a password (sessions are set directly).
UNUSED_HASH = "pbkdf2:sha256:1$salt$" + "0" * 64
ROLE_USERS = {"viewer": "vera", "operator": "otto", "admin": "ada"}
TOKEN_SCOPES = {"ingest": ["ingest"], "read": ["read"], "operate": ["operate"], "admin": ["admin"]}


@dataclass(frozen=True)
class Accounts:
    tokens: dict[str, str]  # scope → clear token
    spare_token_id: int


def create_accounts(database: Any) -> Accounts:
    """A user per role and a token per scope, plus a spare token that routes may revoke."""
    clear: dict[str, str] = {}
    with database.session() as session:
        for role, name in ROLE_USERS.items():
            credentials.create_user(session, name=name, role=role, password_hash=UNUSED_HASH, now=NOW)
        for scope, scopes in TOKEN_SCOPES.items():
            _, clear[scope] = credentials.create_token(session, name=f"{scope}-bot", scopes=scopes, now=NOW)
        spare, _ = credentials.create_token(session, name="spare", scopes=["read"], now=NOW)
    return Accounts(clear, spare.id)


CSRF = "test-csrf-token-0123456789"


def act_as(client: FlaskClient, user: str | None) -> None:
    """Give the client a session as `user` (None: no user), with a known CSRF token; the session is started
    server-side as a login would."""
    sid = None
    if user is not None:
        database = client.application.extensions["gpuslo"].database
        with database.session() as db:
            sid = web_sessions.start(db, user, now=datetime.now(UTC), lifetime_s=3600)
    with client.session_transaction() as session:
        session.clear()
        session["csrf"] = CSRF
        if user is not None:
            session["user"], session["sid"] = user, sid


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
