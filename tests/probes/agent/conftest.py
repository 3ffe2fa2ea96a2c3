"""Fixtures of the agent tests: a recording ingest server and a port where nothing listens."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from agent_ingest_server import IngestServer


@pytest.fixture
def ingest() -> Iterator[IngestServer]:
    server = IngestServer()
    yield server
    server.close()


@pytest.fixture
def dead_port() -> int:
    """A loopback port that refuses connections (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
