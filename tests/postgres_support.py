"""Scratch PostgreSQL databases for tests: created fresh (or copied from a migrated template), dropped afterwards.
A PostgreSQL that cannot be reached fails the test with how to fix it; the PostgreSQL tests are never skipped."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from gpuslo.engine.store.db import Database

POSTGRES_URL = os.environ.get("GPUSLO_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def scratch_database(label: str, template: str | None = None) -> Iterator[Database]:
    """A fresh, migrated database `gpuslo_<label>_<pid>_<random>`; a copy of `template` (a migrated database
    nobody is connected to) when given, which skips the migrations."""
    admin_url = make_url(POSTGRES_URL)
    name = f"gpuslo_{label}_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")))
    except OperationalError as exc:
        admin.dispose()
        unreachable = str(exc.orig).strip().splitlines()[0]
        pytest.fail(f"PostgreSQL is not reachable at {admin_url!r}: {unreachable}. Start it or set "
                    "GPUSLO_TEST_POSTGRES_URL; the PostgreSQL tests are never skipped.", pytrace=False)
    database = Database(admin_url.set(database=name).render_as_string(hide_password=False))
    try:
        if template is None:
            database.upgrade()
        yield database
    finally:
        database.dispose()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
