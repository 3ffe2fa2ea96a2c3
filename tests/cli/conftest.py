"""Fixtures of the CLI tests: the real app served on a free local port, and a port nobody listens on."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import RULES_DIR, LiveServer
from werkzeug.serving import make_server

from gpuslo.engine.config import Settings
from gpuslo.web import create_app


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    """The real app and core on SQLite with the shipped rulebooks, served by werkzeug in a thread."""
    from gpuslo.engine.core import Gpuslo

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'var' / 'gpuslo.db'}", rules_dir=RULES_DIR)
    core = Gpuslo.open(settings)
    http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield LiveServer(f"http://127.0.0.1:{http.server_port}", core)
    finally:
        http.shutdown()
        thread.join(timeout=10)
        core.close()


@pytest.fixture
def closed_port() -> int:
    """A local TCP port that was free a moment ago: connecting to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
