"""`gpuslo api-tokens` and `gpuslo users`: API tokens and human accounts, written straight to the database.

Each change writes an audit row in its own transaction, with the actor `cli:<login name>`. The command was
`gpuslo tokens`, a name it shared with the LLM tokens of `gpuslo probe tokens`; that name stays a hidden alias for
one release and says so on stderr.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import click
from sqlalchemy.orm import Session

from gpuslo.engine.access import ROLES, SCOPES, hash_password
from gpuslo.engine.store import audit, credentials
from gpuslo.engine.store.db import Database

T = TypeVar("T")


def _actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (some containers)
        return "cli"


@contextmanager
def _database(ctx: click.Context) -> Iterator[Database]:
    from gpuslo.cli.main import settings_of

    database = Database(settings_of(ctx).database_url)
    try:
        database.upgrade()  # tokens and users may be made before the first `gpuslo serve`
        yield database
    finally:
        database.dispose()


def _audited(ctx: click.Context, change: Callable[[Session, datetime], T]) -> T:
    with _database(ctx) as database, database.session() as session:
        return change(session, datetime.now(UTC))


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ") if moment else "-"


@click.group("api-tokens")
def api_tokens() -> None:
    """Create, list and revoke API tokens (scopes: ingest, read, operate, admin)."""


@api_tokens.command("create")
@click.option("--name", required=True, help="Who or what uses the token (shown in the audit log as token:NAME).")
@click.option("--scope", "scopes", multiple=True, required=True, type=click.Choice(SCOPES),
              help="A permission; repeat for several. admin implies operate and read; operate implies read.")
@click.pass_context
def tokens_create(ctx: click.Context, name: str, scopes: tuple[str, ...]) -> None:
    """Create a token and print it once: only its sha256 is stored."""

    def change(session: Session, now: datetime) -> tuple[credentials.TokenView, str]:
        token, clear = credentials.create_token(session, name=name, scopes=scopes, now=now)
        audit.record(session, at=now, actor=_actor(), action="token.create", target_type="token",
                     target_id=token.id, after=token.to_dict(), detail="cli")
        return token, clear

    token, clear = _audited(ctx, change)
    click.echo(f"token {token.id} ({token.name}, scopes {', '.join(token.scopes)}); shown once, store it now:",
               err=True)
    click.echo(clear)


@api_tokens.command("list")
@click.pass_context
def tokens_list(ctx: click.Context) -> None:
    """List tokens (id, name, prefix, scopes, created, revoked); never the tokens themselves."""
    with _database(ctx) as database, database.session(readonly=True) as session:
        found = credentials.list_tokens(session)
    for t in found:
        click.echo(f"{t.id}\t{t.name}\t{t.prefix}…\t{','.join(t.scopes)}\t{_when(t.created_at)}\t"
                   f"{'revoked ' + _when(t.revoked_at) if t.revoked_at else 'active'}")


@api_tokens.command("revoke")
@click.argument("token_id", type=int)
@click.pass_context
def tokens_revoke(ctx: click.Context, token_id: int) -> None:
    """Revoke a token by id; requests with it are refused from now on."""

    def change(session: Session, now: datetime) -> credentials.TokenView:
        before = credentials.get_token(session, token_id)
        token = credentials.revoke_token(session, token_id, now=now)
        audit.record(session, at=now, actor=_actor(), action="token.revoke", target_type="token",
                     target_id=token_id, before=before.to_dict() if before else None, after=token.to_dict(),
                     detail="cli")
        return token

    token = _audited(ctx, change)
    click.echo(f"revoked token {token.id} ({token.name})")


class DeprecatedAlias(click.Group):
    """A hidden old name of a group: the same subcommands, after a deprecation note on stderr."""

    def __init__(self, name: str, target: click.Group, removal: str):
        super().__init__(name, commands=target.commands, hidden=True,
                         help=f"Deprecated name of `gpuslo {target.name}` (removed in {removal}).")
        self.target, self.removal = target, removal

    def invoke(self, ctx: click.Context) -> object:
        click.echo(f"warning: `gpuslo {self.name}` is deprecated and will be removed in {self.removal}; "
                   f"use `gpuslo {self.target.name}` (same subcommands)", err=True)
        return super().invoke(ctx)


tokens_alias = DeprecatedAlias("tokens", api_tokens, removal="the next release")


@click.group()
def users() -> None:
    """Create and manage people who log in to the UI (roles: viewer, operator, admin)."""


def _read_password(password_file: Path | None) -> str:
    if password_file is not None:
        lines = password_file.read_text(encoding="utf-8").splitlines()
        return lines[0] if lines else ""
    return str(click.prompt("Password", hide_input=True, confirmation_prompt=True))


@users.command("create")
@click.argument("name")
@click.option("--role", required=True, type=click.Choice(ROLES))
@click.option("--password-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Read the password from the first line of this file (else a prompt asks for it).")
@click.pass_context
def users_create(ctx: click.Context, name: str, role: str, password_file: Path | None) -> None:
    """Create a user; the password is stored as a salted scrypt hash."""
    password_hash = hash_password(_read_password(password_file))

    def change(session: Session, now: datetime) -> credentials.UserView:
        user = credentials.create_user(session, name=name, role=role, password_hash=password_hash, now=now)
        audit.record(session, at=now, actor=_actor(), action="user.create", target_type="user",
                     target_id=user.name, after=user.to_dict(), detail="cli")
        return user

    user = _audited(ctx, change)
    click.echo(f"created user {user.name} ({user.role})")


@users.command("list")
@click.pass_context
def users_list(ctx: click.Context) -> None:
    """List users: name, role, created, disabled."""
    with _database(ctx) as database, database.session(readonly=True) as session:
        found = credentials.list_users(session)
    for u in found:
        click.echo(f"{u.name}\t{u.role}\t{_when(u.created_at)}\t{'disabled' if u.disabled_at else 'active'}")


def _update(ctx: click.Context, name: str, action: str, **changes: object) -> credentials.UserView:
    def change(session: Session, now: datetime) -> credentials.UserView:
        values = {k: (now if v is True and k == "disabled_at" else v) for k, v in changes.items()}
        before, after = credentials.update_user(session, name, now=now, **values)  # type: ignore[arg-type]
        audit.record(session, at=now, actor=_actor(), action=action, target_type="user", target_id=name,
                     before=before.to_dict(), after=after.to_dict(), detail="cli")
        return after

    return _audited(ctx, change)


@users.command("set-role")
@click.argument("name")
@click.argument("role", type=click.Choice(ROLES))
@click.pass_context
def users_set_role(ctx: click.Context, name: str, role: str) -> None:
    """Change a user's role; it applies to their next request."""
    user = _update(ctx, name, "user.set_role", role=role)
    click.echo(f"user {user.name} is now {user.role}")


@users.command("set-password")
@click.argument("name")
@click.option("--password-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Read the new password from the first line of this file (else a prompt asks for it).")
@click.pass_context
def users_set_password(ctx: click.Context, name: str, password_file: Path | None) -> None:
    """Set a user's password; every login session of the user ends at once."""
    _update(ctx, name, "user.set_password", password_hash=hash_password(_read_password(password_file)))
    click.echo(f"password of {name} changed; their sessions have ended")


@users.command("disable")
@click.argument("name")
@click.pass_context
def users_disable(ctx: click.Context, name: str) -> None:
    """Disable a user: their sessions end at the next request and they cannot log in."""
    _update(ctx, name, "user.disable", disabled_at=True)
    click.echo(f"user {name} is disabled")


@users.command("enable")
@click.argument("name")
@click.pass_context
def users_enable(ctx: click.Context, name: str) -> None:
    """Enable a disabled user again."""
    _update(ctx, name, "user.enable", enable=True)
    click.echo(f"user {name} is enabled")


