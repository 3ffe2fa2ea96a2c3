"""Reading stored events back, whatever is stored: a row written before ingest checked a range must neither stop
the engine nor make a listing answer 503. Such a row reads as its envelope columns plus the reason it fails."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuslo.engine.errors import EventError
from gpuslo.engine.events import Event, parse_event

ERROR_MAX = 2000  # characters of a quarantine reason kept in events.error


@dataclass(frozen=True)
class ReadEvent:
    """A stored event as read back; `error` says why its body no longer validates (then `event` holds only the
    envelope columns: id, kind, time, host)."""

    event: Event
    error: str | None = None


def describe(exc: BaseException) -> str:
    """A quarantine reason: the exception's type and message, bounded."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_MAX else text[:ERROR_MAX - 3] + "..."


def read_event(body: Any, *, event_id: str, kind: str, time: datetime, host: str) -> ReadEvent:
    """The stored body as an Event, or the envelope columns and the reason the body fails validation today."""
    try:
        return ReadEvent(parse_event(body))
    except EventError as exc:
        error = f"stored body fails validation: {exc}"
    except Exception as exc:  # noqa: BLE001  # any body at all must read back
        error = f"stored body cannot be read: {describe(exc)}"
    return ReadEvent(Event(id=event_id, kind=kind, time=time, host=host), error[:ERROR_MAX])
