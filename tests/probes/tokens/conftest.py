"""Fixtures for the token-probe tests: the local streaming server and the event contract check."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Sequence

import pytest
from tokens_server import StreamServer

from gpuslo.engine.events import Event, parse_event


@pytest.fixture(scope="session")
def stream_server() -> Iterator[StreamServer]:
    """The server, on a free port for the whole session."""
    server = StreamServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def free_port_refusing() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def assert_valid() -> Callable[[Sequence[Event]], None]:
    """Checks events against the contract: they survive parse_event unchanged, ids unique, source tokens."""

    def check(events: Sequence[Event]) -> None:
        for event in events:
            assert parse_event(event.to_dict()).to_dict() == event.to_dict()
            assert event.source == "tokens"
        assert len({event.id for event in events}) == len(events)

    return check
