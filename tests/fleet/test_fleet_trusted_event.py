"""The worker's event build from the stream (events.trusted_event): the same Event as parse_event for what the
publishers write, and parse_event's full validation for anything else."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import engine_workload as workload  # noqa: E402

from gpuslo.engine.errors import EventError  # noqa: E402
from gpuslo.engine.events import parse_event, trusted_event  # noqa: E402


def test_the_published_form_builds_the_same_event_as_parse_event() -> None:
    events = [workload.to_event(item) for item in workload.mixed(3000)]
    decoded = [orjson.loads(orjson.dumps(event.to_dict())) for event in events]
    built = [trusted_event(obj) for obj in decoded]
    assert built == events
    assert [e.time_sent for e in built] == [None] * len(events)
    assert {e.kind for e in built} == {e.kind for e in events}


@pytest.mark.parametrize("bad", [
    {"id": "no-kind", "time": "yesterday"},
    {"id": "x", "kind": "gpu_xid", "time": "2026-12-02T10:00:00.000000Z", "host": 7},
    {"id": "x", "kind": "no-such-kind", "time": "2026-12-02T10:00:00.000000Z", "host": "h"},
    {"id": "x", "kind": "gpu_xid", "time": "2026-13-02T10:00:00.000000Z", "host": "h"},
    42,
])
def test_what_is_not_the_published_form_is_validated_whole(bad: object) -> None:
    with pytest.raises(EventError):
        trusted_event(bad)


def test_an_offset_time_keeps_what_the_client_sent() -> None:
    obj = {"id": "x", "kind": "gpu_xid", "time": "2026-12-02T11:00:00+01:00", "host": "h", "gpu": 0,
           "attrs": {"xid": 79}}
    assert trusted_event(obj) == parse_event(dict(obj))
    assert trusted_event(obj).time_sent == "2026-12-02T11:00:00+01:00"
