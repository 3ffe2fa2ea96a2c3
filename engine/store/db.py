"""The database handle: engine, per-connection settings, transactional sessions and schema upgrade."""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gpuslo.engine.errors import ConfigError, StoreError

_SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
    # An acknowledged ingest must survive a power loss, not only a crash.
    "PRAGMA synchronous=FULL",
)


def describe_error(operation: str, exc: BaseException) -> StoreError:
    """A StoreError naming the operation and the driver's one-line reason, without the SQL or traceback."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    reason = lines[0] if lines else type(cause).__name__
    return StoreError(f"{operation} failed: {reason}")


def normalize_url(url: str) -> URL:
    """Parse a database URL; plain `postgresql://` means the psycopg 3 driver."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"database_url: cannot parse {url!r}: {exc}") from exc
    if parsed.drivername in {"postgresql", "postgres"}:
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in {"sqlite", "postgresql"}:
        raise ConfigError(
            f"database_url: only sqlite and postgresql are supported, got {parsed.drivername!r}"
        )
    return parsed


def migrations_folder() -> str:
    """Where the Alembic scripts are, whether installed from a checkout or a wheel."""
    return str(importlib.resources.files("gpuslo.migrations"))


def _configure_sqlite(engine: Engine, url: URL) -> None:
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not pysqlite, decide when transactions begin (needed for savepoints).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in _SQLITE_PRAGMAS:
                cursor.execute(pragma)
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # Writers take the write lock up front: a deferred read-then-write transaction would fail
        # with SQLITE_BUSY instead of waiting when another writer committed in between.
        readonly = connection.get_execution_options().get("gpuslo_readonly", False)
        connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


class Database:
    """One database: SQLite (the default, a file) or PostgreSQL through psycopg 3."""

    def __init__(self, url: str):
        parsed = normalize_url(url)
        self.url = parsed.render_as_string(hide_password=False)
        try:
            self.engine = create_engine(parsed, pool_pre_ping=parsed.get_backend_name() != "sqlite")
        except (SQLAlchemyError, ImportError) as exc:
            raise describe_error(f"opening database {parsed!r}", exc) from exc
        if self.dialect == "sqlite":
            _configure_sqlite(self.engine, parsed)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._readonly_sessions = sessionmaker(
            self.engine.execution_options(gpuslo_readonly=True), expire_on_commit=False
        )

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    @contextmanager
    def session(self, *, readonly: bool = False) -> Iterator[Session]:
        """A transaction: commits when the block ends, rolls back on any error. Driver errors: StoreError."""
        session = (self._readonly_sessions if readonly else self._sessions)()
        try:
            if readonly and self.dialect == "postgresql":
                session.execute(text("SET TRANSACTION READ ONLY"))
            yield session
            session.commit()
        except SQLAlchemyError as exc:
            session.rollback()
            raise describe_error("database transaction", exc) from exc
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def upgrade(self, revision: str = "head") -> None:
        """Bring the schema to `revision` with the packaged Alembic migrations."""
        config = Config()
        config.set_main_option("script_location", migrations_folder())
        try:
            with self.engine.begin() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
        except SQLAlchemyError as exc:
            raise describe_error("schema upgrade", exc) from exc

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({make_url(self.url)!r})"
