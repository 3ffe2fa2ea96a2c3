"""Users and API tokens in the database: create, list, find, revoke. The caller owns the transaction.

Clear tokens and passwords never reach this module's tables: tokens are stored as sha256, passwords as
werkzeug hashes (gpuslo.engine.access).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from gpuslo.engine.access import ROLES, hash_token, new_token, permissions_of_scopes
from gpuslo.engine.errors import ConfigError, InvalidTransition, NotFoundError
from gpuslo.engine.store import web_sessions
from gpuslo.engine.store.access_models import ApiTokenRow, UserRow
from gpuslo.engine.store.rows import require_aware, store_operation

MAX_NAME = 200


@dataclass(frozen=True)
class TokenView:
    id: int
    name: str
    prefix: str
    scopes: tuple[str, ...]
    created_at: datetime
    revoked_at: datetime | None

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "prefix": self.prefix, "scopes": list(self.scopes),
                "created_at": self.created_at, "revoked_at": self.revoked_at}


@dataclass(frozen=True)
class UserView:
    id: int
    name: str
    role: str
    password_hash: str
    created_at: datetime
    disabled_at: datetime | None

    def to_dict(self) -> dict[str, object]:
        """Public fields only: the password hash never leaves through an API or an audit row."""
        return {"id": self.id, "name": self.name, "role": self.role, "created_at": self.created_at,
                "disabled_at": self.disabled_at}


def _token_view(row: ApiTokenRow) -> TokenView:
    return TokenView(row.id, row.name, row.prefix, tuple(row.scopes), row.created_at, row.revoked_at)


def _user_view(row: UserRow) -> UserView:
    return UserView(row.id, row.name, row.role, row.password_hash, row.created_at, row.disabled_at)


def _check_name(name: str, what: str) -> str:
    clean = name.strip()
    if not clean or len(clean) > MAX_NAME or any(ch.isspace() and ch != " " for ch in clean):
        raise ConfigError(f"{what} name must be 1-{MAX_NAME} printable characters, got {name!r}")
    return clean


# Asked on every loopback request while none exists (bootstrap): one driver statement, no ORM session.
_CREDENTIALS_EXIST = "SELECT EXISTS (SELECT 1 FROM users) OR EXISTS (SELECT 1 FROM api_tokens)"


@store_operation
def credentials_exist(connection: Connection) -> bool:
    """True once any user or token was ever created (revoked tokens count: revoking all never reopens); on a
    bare connection (read-only), without a Session: about 8x cheaper on SQLite."""
    return bool(connection.exec_driver_sql(_CREDENTIALS_EXIST).scalar())


@store_operation
def create_token(session: Session, *, name: str, scopes: Sequence[str], now: datetime) -> tuple[TokenView, str]:
    """Store a new token; returns its view and the clear token, which is shown once and never stored."""
    require_aware(now, "create_token")
    if not scopes:
        raise ConfigError("a token needs at least one scope")
    permissions_of_scopes(scopes)  # refuses unknown scopes
    clear = new_token()
    row = ApiTokenRow(name=_check_name(name, "token"), token_hash=hash_token(clear), prefix=clear[:10],
                      scopes=sorted(set(scopes)), created_at=now, revoked_at=None)
    session.add(row)
    session.flush()
    return _token_view(row), clear


@store_operation
def list_tokens(session: Session) -> list[TokenView]:
    return [_token_view(r) for r in session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.id))]


@store_operation
def get_token(session: Session, token_id: int) -> TokenView | None:
    row = session.get(ApiTokenRow, token_id)
    return _token_view(row) if row else None


@store_operation
def find_token(session: Session, clear: str) -> TokenView | None:
    """The unrevoked token whose hash matches `clear`, else None (the lookup is by hash, never by clear text)."""
    row = session.scalars(select(ApiTokenRow).where(ApiTokenRow.token_hash == hash_token(clear),
                                                    ApiTokenRow.revoked_at.is_(None))).first()
    return _token_view(row) if row else None


@store_operation
def revoke_token(session: Session, token_id: int, *, now: datetime) -> TokenView:
    require_aware(now, "revoke_token")
    row = session.scalars(select(ApiTokenRow).where(ApiTokenRow.id == token_id).with_for_update()).first()
    if row is None:
        raise NotFoundError(f"no token with id {token_id}")
    if row.revoked_at is not None:
        raise InvalidTransition(f"token {token_id} is already revoked")
    row.revoked_at = now
    session.flush()
    return _token_view(row)


@store_operation
def create_user(session: Session, *, name: str, role: str, password_hash: str, now: datetime) -> UserView:
    require_aware(now, "create_user")
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    clean = _check_name(name, "user")
    if session.scalars(select(UserRow.id).where(UserRow.name == clean)).first() is not None:
        raise ConfigError(f"user {clean!r} already exists")
    row = UserRow(name=clean, role=role, password_hash=password_hash, created_at=now, disabled_at=None)
    session.add(row)
    session.flush()
    return _user_view(row)


@store_operation
def get_user(session: Session, name: str) -> UserView | None:
    row = session.scalars(select(UserRow).where(UserRow.name == name)).first()
    return _user_view(row) if row else None


@store_operation
def list_users(session: Session) -> list[UserView]:
    return [_user_view(r) for r in session.scalars(select(UserRow).order_by(UserRow.name))]


@store_operation
def update_user(session: Session, name: str, *, role: str | None = None, disabled_at: datetime | None = None,
                enable: bool = False, password_hash: str | None = None,
                now: datetime | None = None) -> tuple[UserView, UserView]:
    """Change a user's role or password, or disable/enable them; returns (before, after).

    A new password or a disable ends every login session of the user at once (server-side)."""
    row = session.scalars(select(UserRow).where(UserRow.name == name).with_for_update()).first()
    if row is None:
        raise NotFoundError(f"no user named {name!r}")
    before = _user_view(row)
    if role is not None:
        if role not in ROLES:
            raise ConfigError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
        row.role = role
    if disabled_at is not None:
        row.disabled_at = disabled_at
    if enable:
        row.disabled_at = None
    if password_hash is not None:
        row.password_hash = password_hash
    session.flush()
    ended_at = now or disabled_at
    if password_hash is not None or disabled_at is not None:
        if ended_at is None:
            raise ValueError("update_user: `now` is needed to end the user's sessions")
        web_sessions.end_all(session, row.name, now=ended_at,
                             reason="password_changed" if password_hash is not None else "user_disabled")
    return before, _user_view(row)
