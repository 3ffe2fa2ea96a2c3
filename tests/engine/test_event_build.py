"""parse_event's fast paths build the same Event as the dataclass constructor with `parse_time`'s time: the
plain-UTC times read by datetime.fromisoformat, the instance filled without the frozen __init__."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from types import MappingProxyType

import pytest

from gpuslo.engine.errors import EventError
from gpuslo.engine.event_checks import parse_time, value_problems, values_clean
from gpuslo.engine.events import Event, parse_event

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from engine_workload import mixed  # noqa: E402

TIMES = ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.1Z", "2026-01-01T00:00:00.123456Z",
         "2026-01-01T00:00:00.123456+00:00", "2026-01-01t00:00:00z", "2026-01-01T00:00:00.123456789Z",
         "2026-01-01T02:30:00+02:30", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z",
         "2024-02-29T12:00:00-00:00", "\u0662\u0660\u0662\u0666-01-01T00:00:00Z"]
BAD_TIMES = ["2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T23:59:60Z",
             "0000-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00"]


def _reference(obj: dict) -> Event:
    """The Event as parse_event built it before its fast paths."""
    sent = obj["time"]
    plain_utc = re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|\+00:00)", sent)
    return Event(
        id=obj["id"], kind=obj["kind"], time=parse_time(sent), host=obj["host"], gpu=obj.get("gpu"),
        gpu_uuid=obj.get("gpu_uuid"), pid=obj.get("pid"), job=obj.get("job"), rank=obj.get("rank"),
        labels=MappingProxyType(dict(obj.get("labels") or {})), source=obj.get("source"),
        attrs=MappingProxyType(dict(obj.get("attrs") or {})), message=obj.get("message"),
        trace_id=obj.get("trace_id"), span_id=obj.get("span_id"),
        time_sent=None if plain_utc else sent,
    )


def _same(built: Event, expected: Event) -> None:
    assert built == expected
    assert vars(built) == vars(expected)  # time_sent too (compare=False), and nothing more
    assert built.time.tzinfo is expected.time.tzinfo and type(built) is Event
    assert built.timestamp == expected.timestamp


def test_the_event_stays_a_plain_frozen_dataclass_the_fast_build_can_fill():
    assert not hasattr(Event, "__slots__") and not hasattr(Event, "__post_init__")
    assert all(f.init for f in dataclasses.fields(Event))
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_event({"id": "e", "kind": "probe_status", "time": TIMES[0], "host": "h",
                     "attrs": {"probe": "p", "state": "up"}}).host = "other"  # type: ignore[misc]


def test_parsed_events_equal_the_constructors_over_the_bench_workload():
    for obj in mixed(3000, seed=5):
        _same(parse_event(obj), _reference(obj))


@pytest.mark.parametrize("sent", TIMES)
def test_every_time_form_reads_as_parse_time_reads_it(sent: str):
    obj = {"id": "e1", "kind": "token_stall", "time": sent, "host": "h1", "labels": {"team": "a"},
           "attrs": {"gap_ms": 300}}
    _same(parse_event(obj), _reference(obj))


@pytest.mark.parametrize("sent", BAD_TIMES)
def test_a_bad_time_is_refused_with_parse_times_reason(sent: str):
    with pytest.raises(ValueError) as expected:
        parse_time(sent)
    with pytest.raises(EventError) as refused:
        parse_event({"id": "e1", "kind": "token_stall", "time": sent, "host": "h1", "attrs": {"gap_ms": 300}})
    assert str(expected.value) in str(refused.value)


VALUES = ["plain", "caf\u00e9", "nul\x00here", "\u202eright-to-left", "bell\x07", "\ud800", "", 0, 1.5,
          float("nan"), float("inf"), -float("inf"), True, None, 10**30]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_values_clean_agrees_with_value_problems_at_every_place(value: object):
    for obj in ({"id": "e", "message": value}, {"id": "e", "labels": {"team": value}},
                {"id": "e", "attrs": {"a": 1, "b": value}}, {"id": value, "attrs": {}}):
        assert values_clean(obj) == (value_problems(obj) == []), obj
