"""Helpers for the log probe tests: fixture loading, exact sizes, parsing with a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.logs.parser import LogParser, ParserSettings

FIXTURES = Path(__file__).parent / "fixtures"
READ_TIME = datetime(2025, 3, 1, tzinfo=UTC)  # the clock for lines without a time stamp


def fixture_bytes(name: str) -> bytes:
    """A fixture without its leading `#` header (the header notes which real format it imitates)."""
    lines = (FIXTURES / name).read_bytes().splitlines(keepends=True)
    while lines and lines[0].startswith(b"#"):
        lines.pop(0)
    return b"".join(lines)


def size(number: str, unit: str) -> int:
    return int((Decimal(number) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]).to_integral_value())


def parse_all(data: bytes, source: str = "test.log") -> list[Event]:
    parser = LogParser(ParserSettings(host="node1", source=source), clock=lambda: READ_TIME)
    events = parser.scan(data, 0) + parser.flush()
    for event in events:
        assert parse_event(event.to_dict()) == event
    return events


def load(name: str) -> list[Event]:
    """The events of one fixture file."""
    return parse_all(fixture_bytes(name), name)


def events(text: str, source: str = "test") -> list[Event]:
    """The events of `text` (one final newline added), parsed as parse_all does."""
    return parse_all(text.encode() + b"\n", source)


def one(text: str) -> Event:
    """The one event of `text` (fails listing them if there are more or none)."""
    found = events(text)
    assert len(found) == 1, [e.to_dict() for e in found]
    return found[0]
