"""Start-up reads back the durability settings (SQLite pragmas, PostgreSQL synchronous_commit and fsync) and
refuses to run without them unless allowed; the audit log cannot be changed through the application's own
connection, and only the audited prune deletes from it. SQLite and PostgreSQL.

Defects of issue 11: SQLite pragmas were never read back; PostgreSQL with synchronous_commit=off went unnoticed;
audit rows could be updated or deleted by the application's own database role.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, event, text, update
from sqlalchemy.engine import make_url

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.errors import ConfigError, StoreError
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.store import audit, retention
from gpuslo.engine.store.access_models import AuditRow
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.durability import check_durability

GPUSLO = Path(sys.executable).parent / "gpuslo"
OLD = datetime(2025, 1, 1, tzinfo=UTC)


def _audit_rows(database: Database) -> list[audit.AuditEntry]:
    with database.session(readonly=True) as session:
        return list(audit.iter_audit(session, AuditFilter()))


def _write_audit(database: Database, at: datetime, action: str = "acknowledge") -> None:
    with database.session() as session:
        audit.record(session, at=at, actor="alice", action=action, target_type="violation", target_id=1)


def test_the_durability_settings_are_read_back(database: Database):
    readings = {r.name: r.found for r in check_durability(database)}
    if database.dialect == "sqlite":
        assert readings == {"journal_mode": "wal", "busy_timeout": "5000", "foreign_keys": "1", "synchronous": "2"}
    else:
        assert readings["synchronous_commit"] != "off" and readings["fsync"] == "on"


def test_sqlite_with_a_pragma_undone_refuses_to_start_unless_allowed(tmp_path: Path, caplog):
    url = f"sqlite:///{tmp_path / 'var' / 'gpuslo.db'}"
    Database(url).upgrade()
    database = Database(url)

    @event.listens_for(database.engine, "connect")
    def _plugin(dbapi_connection, _record):  # a later connect hook that turns durability and integrity off
        dbapi_connection.execute("PRAGMA synchronous=OFF")
        dbapi_connection.execute("PRAGMA foreign_keys=OFF")

    try:
        with pytest.raises(ConfigError) as refused:
            check_durability(database)
        assert "synchronous is '0', gpuslo needs '2'" in str(refused.value)
        assert "foreign_keys is '0', gpuslo needs '1'" in str(refused.value)
        assert "allow_unsafe_durability" in str(refused.value)
        caplog.set_level(logging.WARNING)
        check_durability(database, allow_unsafe=True)
        assert "UNSAFE DURABILITY" in caplog.text
    finally:
        database.dispose()


@pytest.fixture
def async_commit_database(postgres_database: Database):
    """A PostgreSQL database of its own whose sessions run with synchronous_commit = off."""
    admin_url = make_url(postgres_database.url).set(database="postgres")
    name = f"gpuslo_async_{secrets.token_hex(4)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
        connection.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
    try:
        yield admin_url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _serve(url: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(GPUSLO), "serve", "--port", "0", "--rules", str(tmp_path)], cwd=tmp_path,
                            env={**os.environ, "GPUSLO_DATABASE_URL": url, **env}, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)


def test_gpuslo_serve_refuses_postgresql_with_synchronous_commit_off(async_commit_database: str, tmp_path: Path):
    refused = _serve(async_commit_database, tmp_path)
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 2, err
    assert "synchronous_commit is 'off', gpuslo needs 'on'" in err and "allow_unsafe_durability" in err
    allowed = _serve(async_commit_database, tmp_path, GPUSLO_ALLOW_UNSAFE_DURABILITY="true")
    try:
        lines = []
        for line in allowed.stderr or ():
            lines.append(line)
            if "gpuslo listening on" in line:
                address = line.rsplit("listening on ", 1)[1].split()[0]
                assert httpx.get(f"{address}/healthz", timeout=10).status_code == 200
                break
        assert any("UNSAFE DURABILITY" in line and "synchronous_commit" in line for line in lines), lines
    finally:
        allowed.terminate()
        allowed.communicate(timeout=30)


def test_audit_rows_cannot_be_updated_or_deleted_through_the_application(database: Database):
    _write_audit(database, OLD)
    for change in (update(AuditRow).values(actor="mallory"), AuditRow.__table__.delete()):
        with pytest.raises(StoreError, match="audit_log is append-only"), database.session() as session:
            session.execute(change)
    with pytest.raises(StoreError, match="append-only"), database.session() as session:
        session.execute(text("UPDATE audit_log SET detail = 'edited'"))  # plain SQL, every row
    if database.dialect == "postgresql":
        with pytest.raises(StoreError, match="append-only"), database.session() as session:
            session.execute(text("TRUNCATE audit_log"))
    with pytest.raises(StoreError, match="older than one day"), database.session() as session:
        retention.prune_audit(session, datetime.now(UTC), datetime.now(UTC))  # a grant may not reach today
    (row,) = _audit_rows(database)
    assert row.actor == "alice" and row.detail is None


def test_audit_retention_prunes_old_rows_by_the_audited_path(database: Database, tmp_path: Path):
    now = datetime.now(UTC)
    _write_audit(database, OLD)
    _write_audit(database, OLD + timedelta(days=1))
    _write_audit(database, now - timedelta(days=2), "resolve")
    rules = tmp_path / "rules"
    rules.mkdir()
    settings = Settings(database_url=database.url, rules_dir=rules, audit_retention_days=30)
    core = Gpuslo(settings, database, Metrics())
    try:
        core.run_retention(now)
    finally:
        core.runtime.stop()
    rows = _audit_rows(database)
    assert [r.action for r in rows] == ["resolve", "audit.prune"]
    assert rows[1].actor == "engine" and rows[1].detail.startswith("deleted 2 audit rows from before")
    with database.session(readonly=True) as session:
        assert session.scalar(text("SELECT count(*) FROM audit_prune_grants")) == 0
