"""Fixtures shared by every test area: a migrated database on SQLite and PostgreSQL, and an event factory."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from postgres_support import scratch_database
from sqlalchemy import text

from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import Base

EVENT_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)

# ---- databases ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[Database]:
    """A fresh PostgreSQL database for this test session, migrated once and dropped at the end."""
    with scratch_database("test") as database:
        yield database


def _delete_all_rows(database: Database) -> None:
    with database.engine.begin() as connection:
        # The audit log's append-only triggers (migration 0006) guard the application's statements; emptying the
        # test database is the superuser's job, which replica mode does without firing triggers.
        connection.execute(text("SET LOCAL session_replication_role = replica"))
        for table in reversed(Base.metadata.sorted_tables):
            connection.execute(table.delete())


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A migrated, empty database: a fresh SQLite file, or the session's PostgreSQL database emptied."""
    if request.param == "sqlite":
        database = Database(f"sqlite:///{tmp_path / 'var' / 'gpuslo.db'}")
        database.upgrade()
        yield database
        database.dispose()
        return
    database = request.getfixturevalue("postgres_database")
    _delete_all_rows(database)
    yield database
    _delete_all_rows(database)


# ---- events -------------------------------------------------------------------------------------------


@pytest.fixture
def make_event() -> Callable[..., Event]:
    """A factory of valid events: `make_event(id="x", host="node-b", time=datetime(...))`.

    Defaults: ids ev-1, ev-2, ...; a cuda_oom on node-a GPU 0; times one second apart from 2025-01-01 UTC.
    `time` may be a datetime or an RFC 3339 string; changing `kind` drops the default attrs (pass your own).
    """
    counter = itertools.count(1)

    def factory(**overrides: Any) -> Event:
        n = next(counter)
        body: dict[str, Any] = {
            "id": f"ev-{n}", "kind": "cuda_oom", "time": EVENT_EPOCH + timedelta(seconds=n),
            "host": "node-a", "gpu": 0, "source": "test",
        }
        if overrides.get("kind", "cuda_oom") == "cuda_oom":
            body["attrs"] = {"api": "cudaMalloc", "requested_bytes": 2 * 1024**3, "free_bytes": 1024**3}
        body.update(overrides)
        if isinstance(body["time"], datetime):
            body["time"] = format_time(body["time"])
        return parse_event({key: value for key, value in body.items() if value is not None})

    return factory
