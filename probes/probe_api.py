"""What the node agent needs from a probe: start, periodic jobs that return events, stop."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from gpuslo.engine.events import Event, format_time, parse_event


@dataclass(frozen=True)
class ProbeJob:
    """A sampler the agent's scheduler runs every `interval_s`; it returns the events it observed."""

    name: str
    interval_s: float
    run: Callable[[], Sequence[Event]]


class Probe(Protocol):
    """A probe the agent drives. `start` raises ProbeError when the probe cannot run on this host."""

    name: str

    def start(self) -> None: ...

    def jobs(self) -> Sequence[ProbeJob]: ...

    def stop(self) -> None: ...


def new_event_id(prefix: str) -> str:
    """A unique event id (the server's idempotency key); it is stored with the event, so retries reuse it."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now_text() -> str:
    return format_time(datetime.now(UTC))


def status_event(host: str, probe: str, state: str, detail: str, dropped: int = 0) -> Event:
    """A `probe_status` event: a probe (or the shipper) is up, down, degraded or unavailable, and why."""
    return parse_event({
        "id": new_event_id("status"), "kind": "probe_status", "time": now_text(), "host": host,
        "source": "agent",
        "attrs": {"probe": probe, "state": state, "dropped": dropped, "detail": detail[:1000]},
    })
