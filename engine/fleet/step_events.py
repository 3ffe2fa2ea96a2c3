"""The events of one worker step, each built once: an event reaches ~1.4 partitions (one per key space that reads
its kind), and the copies a worker fetches in one step are byte-for-byte the same JSON (publish.py writes one
body per event into every message that holds it), so the second copy reuses the first's Event.

The messages of different subjects hold different runs of events, so a whole payload is never the same twice:
the cache is per event object. A copy is reused only when it is the same JSON as the cached one (its orjson
text, which tells 1, 1.0 and true apart where `==` does not); only events that built are cached, so an object
that is not a valid event always goes through parse_event and gets its precise EventError. Sharing is safe:
an Event is frozen (its only late attribute, `timestamp`, is computed once from its fields)."""

from __future__ import annotations

from typing import Any

import orjson

from gpuslo.engine.events import Event, parse_event


class _Built:
    """A cached event: the object it was built from, that object's JSON text (once asked for) and the Event."""

    __slots__ = ("obj", "text", "event")

    def __init__(self, obj: dict[str, Any], event: Event):
        self.obj, self.text, self.event = obj, b"", event


class StepEvents:
    """Builds events like parse_event, remembering those that built (by id) for the rest of one step."""

    def __init__(self) -> None:
        self._built: dict[str, _Built] = {}
        self.reused = 0

    def build(self, obj: object) -> Event:
        """parse_event(obj), or the Event already built this step from the same JSON."""
        event_id = obj.get("id") if type(obj) is dict else None
        if type(event_id) is not str:
            return parse_event(obj)
        assert isinstance(obj, dict)
        seen = self._built.get(event_id)
        if seen is not None and _same(seen, obj):
            self.reused += 1
            return seen.event
        event = parse_event(obj)  # raises EventError: nothing is cached
        if seen is None:
            self._built[event_id] = _Built(obj, event)
        return event


def _same(built: _Built, obj: dict[str, Any]) -> bool:
    """Whether `obj` is the same JSON as the object the cached event was built from."""
    try:
        if not built.text:
            built.text = orjson.dumps(built.obj)
        return built.text == orjson.dumps(obj)
    except orjson.JSONEncodeError:  # not from orjson.loads (an integer beyond 64 bits): never shared
        return False
