"""Fixtures of the web tests: an app on FakeCore (request parsing only) and apps on the real Gpuslo core."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from web_support import FakeCore, app_settings

from gpuslo.engine.config import Settings
from gpuslo.engine.store.db import Database
from gpuslo.web import create_app


@pytest.fixture
def fake_core(tmp_path) -> Iterator[FakeCore]:
    core = FakeCore(Settings(max_body_bytes=4096, max_events_per_request=5, rules_dir=tmp_path))
    yield core
    core.close()


@pytest.fixture
def fake_client(fake_core: FakeCore) -> FlaskClient:
    """A test client on an app whose core is the FakeCore (request parsing and status mapping only)."""
    return create_app(fake_core.settings, core=fake_core).test_client()  # type: ignore[arg-type]


@pytest.fixture
def core(database: Database, tmp_path: Path) -> Iterator[Any]:
    """The real Gpuslo core on the test database, with an empty rules folder (the API tests need no rule)."""
    from gpuslo.engine.core import Gpuslo

    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    opened = Gpuslo.open(app_settings(database, rules_dir))
    yield opened
    opened.close()


@pytest.fixture
def client(core: Any) -> FlaskClient:
    """A test client on the real app built around the real core."""
    return create_app(core.settings, core=core).test_client()
