"""Who may do what: roles of humans, scopes of API tokens, and the hashing of tokens and passwords.

Permissions are the four token scopes. `admin` implies `operate` and `read`, and `operate` implies `read`
(acknowledging a violation one cannot read makes no sense); `ingest` stands alone so a probe's token can
post events and nothing else. Humans get permissions through their role.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from werkzeug.security import check_password_hash, generate_password_hash

from gpuslo.engine.errors import ConfigError

INGEST, READ, OPERATE, ADMIN = "ingest", "read", "operate", "admin"
SCOPES = (INGEST, READ, OPERATE, ADMIN)
ROLES = ("viewer", "operator", "admin")
_IMPLIED = {INGEST: {INGEST}, READ: {READ}, OPERATE: {OPERATE, READ}, ADMIN: {ADMIN, OPERATE, READ}}
_ROLE_SCOPE = {"viewer": READ, "operator": OPERATE, "admin": ADMIN}
TOKEN_PREFIX = "gps_"
MIN_PASSWORD = 10


def permissions_of_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """Every permission a token with these scopes holds (implied ones included)."""
    held: set[str] = set()
    for scope in scopes:
        if scope not in _IMPLIED:
            raise ConfigError(f"unknown scope {scope!r}: use one of {', '.join(SCOPES)}")
        held |= _IMPLIED[scope]
    return frozenset(held)


def permissions_of_role(role: str) -> frozenset[str]:
    if role not in _ROLE_SCOPE:
        raise ConfigError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    return permissions_of_scopes([_ROLE_SCOPE[role]])


def new_token() -> str:
    """A fresh clear token: 256 random bits, URL-safe, with a recognisable prefix (for secret scanners)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """sha256 hex of a clear token. A plain fast hash is enough: the token has 256 bits of entropy."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def hash_password(password: str) -> str:
    """A salted, slow hash (werkzeug's scrypt); refuses passwords shorter than MIN_PASSWORD."""
    if len(password) < MIN_PASSWORD:
        raise ConfigError(f"the password must have at least {MIN_PASSWORD} characters")
    return generate_password_hash(password, method="scrypt")


def check_password(password_hash: str, password: str) -> bool:
    return check_password_hash(password_hash, password)
