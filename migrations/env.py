"""Alembic environment: run by Database.upgrade() (connection passed in) or by the alembic CLI (URL from
`sqlalchemy.url` or GPUSLO_DATABASE_URL)."""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy.engine import Connection

from gpuslo.engine.store.db import Database, normalize_url
from gpuslo.engine.store.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url") or os.environ.get(
        "GPUSLO_DATABASE_URL", "sqlite:///var/gpuslo.db"
    )
    return normalize_url(url).render_as_string(hide_password=False)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    url = _url()
    context.configure(
        url=url, target_metadata=target_metadata, literal_binds=True,
        render_as_batch=url.startswith("sqlite"), dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    database = Database(_url())
    try:
        with database.engine.begin() as connection:
            _run(connection)
    finally:
        database.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
