"""Session cookies: the signing key (setting, or generated once under var/), and secure cookie flags."""

from __future__ import annotations

import logging
import os
import secrets
from datetime import timedelta
from pathlib import Path

from flask import Flask

from gpuslo.engine.config import Settings
from gpuslo.engine.errors import ConfigError

log = logging.getLogger(__name__)


def load_secret_key(settings: Settings) -> str:
    """settings.secret_key, else the key in settings.secret_key_file, made (mode 0600) on first start.

    Never a built-in default: a known key would let anyone forge a session.
    """
    if settings.secret_key:
        return settings.secret_key
    path = Path(settings.secret_key_file)
    try:
        if path.exists():
            key = path.read_text(encoding="utf-8").strip()
            if len(key) >= 32:
                return key
            raise ConfigError(f"{path}: the secret key is shorter than 32 characters; delete it to make a new one")
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(48)
        # Written whole under a private name, then linked in place: a concurrent start never reads half a key.
        partial = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(key + "\n")
        try:
            os.link(partial, path)
        finally:
            partial.unlink()
    except FileExistsError:  # another process made it first: use theirs
        return load_secret_key(settings)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read or create the session secret key: {exc.strerror}") from exc
    log.info("made a new session secret key in %s", path)
    return key


def configure_sessions(app: Flask, settings: Settings) -> None:
    app.config.update(
        SECRET_KEY=load_secret_key(settings),
        SESSION_COOKIE_NAME="gpuslo_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.session_cookie_secure,  # true behind TLS
        PERMANENT_SESSION_LIFETIME=timedelta(hours=settings.session_hours),
    )
