"""An ingested event and its stored body at once: `parse_event` and `canonical_json(event.to_dict())`.

Ingest stores each event's canonical JSON text (the text its body hash digests). An event sent in canonical
form already is its own `to_dict()`: the schema admits only the fields `to_dict` writes, so when the time is
written as `format_time` writes it (UTC microseconds with `Z`), no field is null and labels and attrs are not
empty, the decoded object serializes to the same text, and the Event is not turned back into a dict for it.
"""

from __future__ import annotations

from gpuslo.engine.events import Event, canonical_json, parse_event

_CANONICAL_TIME_LENGTH = len("2026-01-01T00:00:00.000000Z")


def parse_event_body(obj: object) -> tuple[Event, str]:
    """The Event of a decoded JSON object and its canonical body; EventError as `parse_event` raises it."""
    event = parse_event(obj)
    if type(obj) is dict and _is_canonical(obj, event):
        return event, canonical_json(obj)
    return event, canonical_json(event.to_dict())


def _is_canonical(obj: dict[str, object], event: Event) -> bool:
    """Whether `obj` has exactly the keys and values of `event.to_dict()` (parse_event accepted it)."""
    sent = obj["time"]
    if (event.time_sent is not None or type(sent) is not str or len(sent) != _CANONICAL_TIME_LENGTH
            or sent[-1] != "Z" or not sent.isascii()):
        return False  # another plain UTC form (no fraction, fewer digits, +00:00) is rewritten by format_time
    for value in obj.values():
        if value is None or (type(value) is dict and not value):  # to_dict leaves both out
            return False
    return True
