"""The database handle: engine, per-connection settings, transactional sessions and schema upgrade."""

from __future__ import annotations

import importlib.resources
import threading
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

from gpuslo.engine.errors import ConfigError, StoreError, TransactionConflict

_SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA busy_timeout=5000",
    "PRAGMA foreign_keys=ON",
    # An acknowledged ingest must survive a power loss, not only a crash.
    "PRAGMA synchronous=FULL",
)
# Durability of a "rederivable" transaction (Database.session(rederivable=True)): the engine's output for a
# batch of stored events (violations, evidence, history, outbox rows, and the events' processed_at).
#
# Why NORMAL there does not weaken what gpuslo promises: in WAL mode NORMAL skips only the fsync at commit, so
# a power loss (not a process crash: the WAL is written before commit returns) can drop a *suffix* of such
# commits, never part of one, and never one followed by a FULL commit (the WAL is one sequential file: a FULL
# commit syncs every frame before it). What is acknowledged to someone stays FULL: ingested events (the 200 a
# probe got), human actions and audit rows. A dropped engine commit takes its events' processed_at with it, so
# on restart those events are unprocessed and the refill evaluates them again: the same recovery as a process
# crash between evaluating a batch and committing it, which the engine already has to (and does) handle. A
# receiver notified from a dropped outbox row may be notified again: delivery is at-least-once either way.
# Matches not derived from stored events (absence checks against the wall clock) are committed FULL.
_SQLITE_REDERIVABLE_SYNC = "NORMAL"
_SQLITE_DEFAULT_SYNC = "FULL"


# SQLSTATEs of a transaction PostgreSQL aborted for a concurrent one: deadlock_detected, serialization_failure.
_CONFLICT_STATES = frozenset({"40P01", "40001"})


def describe_error(operation: str, exc: BaseException) -> StoreError:
    """A StoreError naming the operation and the driver's one-line reason, without the SQL or traceback;
    TransactionConflict when the transaction lost to a concurrent one (run it again)."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines()
    reason = lines[0] if lines else type(cause).__name__
    kind = TransactionConflict if getattr(cause, "sqlstate", None) in _CONFLICT_STATES else StoreError
    return kind(f"{operation} failed: {reason}")


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
        options = connection.get_execution_options()
        readonly = options.get("gpuslo_readonly", False)
        if not readonly:  # synchronous is per connection and cannot change inside a transaction: set it here
            wanted = _SQLITE_REDERIVABLE_SYNC if options.get("gpuslo_rederivable") else _SQLITE_DEFAULT_SYNC
            info = connection.connection.info  # lives as long as the pooled DB-API connection
            if info.get("gpuslo_sync", _SQLITE_DEFAULT_SYNC) != wanted:
                connection.exec_driver_sql(f"PRAGMA synchronous={wanted}")
                info["gpuslo_sync"] = wanted
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
        self._rederivable_sessions = sessionmaker(
            self.engine.execution_options(gpuslo_rederivable=True), expire_on_commit=False
        )
        # SQLite has one writer at a time. Writers of this process queue here instead of in SQLite's busy
        # handler, which polls with growing sleeps (1, 2, 5, 10, ... ms) and so kept a waiting ingest asleep
        # well after the engine's transaction had committed (bench/RESULTS.md, (d)). Other processes (the CLI)
        # still meet busy_timeout. Reentrant: a nested write session in one thread behaves as before.
        self._writer = threading.RLock() if self.dialect == "sqlite" else None

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    @contextmanager
    def session(self, *, readonly: bool = False, rederivable: bool = False) -> Iterator[Session]:
        """A transaction: commits when the block ends, rolls back on any error. Driver errors: StoreError.

        `rederivable`: what the transaction writes is re-derived from stored events if a power loss drops it
        (the engine's output for a batch, with the batch's processed_at); its commit does not wait for the
        disk. See _SQLITE_REDERIVABLE_SYNC for why that keeps every durability promise.
        """
        writer = None if readonly else self._writer
        if writer is not None:
            writer.acquire()
        maker = self._readonly_sessions if readonly else self._rederivable_sessions if rederivable else self._sessions
        session = maker()
        try:
            if readonly and self.dialect == "postgresql":
                session.execute(text("SET TRANSACTION READ ONLY"))
            elif rederivable and self.dialect == "postgresql":  # the same argument as for SQLite's NORMAL
                session.execute(text("SET LOCAL synchronous_commit TO OFF"))
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
            if writer is not None:
                writer.release()

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
