"""Fixtures of the ingest hardening tests: `gpuslo`'s real app and core on a free loopback port, on SQLite and on
PostgreSQL, driven over HTTP by httpx."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ingest_support import RULES_DIR, Live, clear_rows
from werkzeug.serving import make_server

from gpuslo.engine.config import Settings
from gpuslo.engine.store.db import Database
from gpuslo.web import create_app


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database: a fresh SQLite file, or the session's PostgreSQL database emptied."""
    if request.param == "sqlite":
        database = Database(f"sqlite:///{tmp_path / 'var' / 'gpuslo.db'}")
        database.upgrade()
        database.dispose()
        yield database.url
        return
    database = request.getfixturevalue("postgres_database")
    clear_rows(database)
    yield database.url
    clear_rows(database)


@pytest.fixture
def start_server(database_url: str) -> Iterator[Callable[..., Live]]:
    """Starts the real server (shipped rulebooks) on the test database; `start_server(**settings)`."""
    from gpuslo.engine.core import Gpuslo

    running: list[tuple[object, threading.Thread, Gpuslo]] = []

    def start(**overrides: object) -> Live:
        values: dict[str, object] = {"database_url": database_url, "rules_dir": RULES_DIR,
                                     "ingest_requests_per_second": 0, "rules_poll_seconds": 0, **overrides}
        settings = Settings(**values)  # type: ignore[arg-type]
        core = Gpuslo.open(settings)
        http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
        thread = threading.Thread(target=http.serve_forever, daemon=True)
        thread.start()
        running.append((http, thread, core))
        return Live(f"http://127.0.0.1:{http.server_port}", core)

    yield start
    for http, thread, core in running:
        http.shutdown()  # type: ignore[attr-defined]
        thread.join(timeout=10)
        core.close()


@pytest.fixture
def live(start_server: Callable[..., Live]) -> Live:
    return start_server()
