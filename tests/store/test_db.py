"""Database: connection settings, URL handling, transactions and error wrapping."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from gpuslo.engine.errors import ConfigError, StoreError
from gpuslo.engine.store import Database, EventFilter
from gpuslo.engine.store.db import migrations_folder, normalize_url
from gpuslo.engine.store.repository import list_events, store_events


def test_sqlite_creates_parent_folder_and_sets_pragmas(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'deep' / 'er' / 'gpuslo.db'}")
    try:
        assert (tmp_path / "deep" / "er").is_dir()
        assert database.dialect == "sqlite"
        with database.engine.connect() as connection:
            pragma = {name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                      for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")}
        assert pragma == {"journal_mode": "wal", "busy_timeout": 5000, "foreign_keys": 1, "synchronous": 2}
    finally:
        database.dispose()


def test_postgresql_url_uses_psycopg() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"


def test_unsupported_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="only sqlite and postgresql"):
        normalize_url("mysql://u@h/db")
    with pytest.raises(ConfigError, match="cannot parse"):
        normalize_url("not a url")


def test_migrations_folder_holds_env() -> None:
    assert (Path(migrations_folder()) / "env.py").is_file()


def test_error_mid_transaction_leaves_nothing(database: Database, make_event) -> None:
    with pytest.raises(RuntimeError), database.session() as session:
        assert store_events(session, [make_event(id="a"), make_event(id="b")]) == ["accepted", "accepted"]
        raise RuntimeError("crash after the insert")
    with database.session(readonly=True) as session:
        assert list_events(session, EventFilter()).total == 0


def test_driver_error_becomes_store_error_naming_the_operation(database: Database) -> None:
    with pytest.raises(StoreError, match="database transaction failed: .*no_such_table"), \
            database.session() as session:
        session.execute(text("SELECT * FROM no_such_table"))


def test_repository_error_names_the_function(database: Database, make_event) -> None:
    # DDL is transactional on both databases: the rename is rolled back with the failed transaction.
    with pytest.raises(StoreError, match="^store_events failed: "), database.session() as session:
        session.execute(text("ALTER TABLE events RENAME TO events_gone"))
        store_events(session, [make_event()])
    with database.session(readonly=True) as session:
        assert list_events(session, EventFilter()).total == 0


def test_readonly_session_refuses_writes_on_postgresql(database: Database, make_event) -> None:
    if database.dialect != "postgresql":
        return  # SQLite has no read-only transactions; readonly there only avoids the write lock
    with pytest.raises(StoreError, match="read-only"), database.session(readonly=True) as session:
        store_events(session, [make_event()])


def test_rederivable_session_commits_without_fsync_and_others_stay_full(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'sync.db'}")
    database.engine.pool.dispose()
    try:
        def synchronous(**options: bool) -> int:
            with database.session(**options) as session:
                return int(session.execute(text("PRAGMA synchronous")).scalar_one())

        assert synchronous() == 2  # FULL: ingest, human actions
        assert synchronous(rederivable=True) == 1  # NORMAL: the engine's output for stored events
        assert synchronous() == 2  # the same pooled connection goes back to FULL
    finally:
        database.dispose()


def test_writers_of_one_process_queue_behind_the_one_writing(tmp_path: Path) -> None:
    import threading
    import time

    database = Database(f"sqlite:///{tmp_path / 'lock.db'}")
    database.upgrade()
    entered = threading.Event()
    waited: list[float] = []

    def second_writer() -> None:
        entered.wait(5)
        started = time.perf_counter()
        with database.session() as session:
            session.execute(text("SELECT 1"))
        waited.append(time.perf_counter() - started)

    try:
        worker = threading.Thread(target=second_writer)
        worker.start()
        with database.session() as session:
            session.execute(text("SELECT 1"))  # holds the write lock (BEGIN IMMEDIATE)
            entered.set()
            time.sleep(0.2)
        worker.join(5)
        assert len(waited) == 1 and waited[0] >= 0.15  # it queued behind the first writer, and got in
    finally:
        database.dispose()
