"""parse_event_body gives parse_event's Event and exactly the stored body the Event's to_dict() serializes to,
whether it serializes the object as sent (canonical form) or rebuilds it (every other form)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from gpuslo.engine import event_body
from gpuslo.engine.errors import EventError
from gpuslo.engine.event_body import parse_event_body
from gpuslo.engine.events import _envelope_schema, canonical_json, parse_event

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from engine_workload import mixed  # noqa: E402

BASE: dict[str, Any] = {"id": "e-1", "kind": "cuda_error", "time": "2026-01-01T00:00:00.123456Z", "host": "n1",
                        "attrs": {"api": "cudaMalloc", "error_name": "cudaErrorMemoryAllocation"}}
# Each change to BASE, and whether the object is serialized as sent (True) or rebuilt from the Event (False).
VARIANTS: list[tuple[dict[str, Any], bool]] = [
    ({}, True), ({"time": "2026-01-01T00:00:00Z"}, False), ({"time": "2026-01-01T00:00:00.1+00:00"}, False),
    ({"time": "2026-01-01T00:00:00.123456+00:00"}, False), ({"time": "2026-01-01T02:30:00.123456+02:30"}, False),
    ({"time": "2026-01-01T00:00:00.123456789Z"}, False), ({"time": "2026-01-01t00:00:00.123456z"}, False),
    ({"time": "\u0662\u0660\u0662\u0666-01-01T00:00:00.123456Z"}, False), ({"gpu": None}, False),
    ({"gpu": 2.0}, True), ({"gpu": 3}, True), ({"labels": {}}, False), ({"labels": {"team": "infer"}}, True),
    ({"attrs": {}}, False), ({"message": ""}, True), ({"message": None}, False),
    ({"message": "caf\u00e9 \u2603"}, True), ({"job": "j", "rank": 0, "pid": 7, "source": "nvml"}, True),
    ({"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331"}, True),
    ({"trace_id": None}, False),
]


def _reference(obj: object) -> tuple[object, str]:
    event = parse_event(obj)
    return event, canonical_json(event.to_dict())


@pytest.mark.parametrize(("change", "as_sent"), VARIANTS, ids=[orjson.dumps(v).decode() for v, _ in VARIANTS])
def test_body_equals_the_events_to_dict(change: dict[str, Any], as_sent: bool) -> None:
    obj = {**BASE, **change}
    assert parse_event_body(obj) == _reference(obj)
    assert event_body._is_canonical(obj, parse_event(obj)) is as_sent


def test_a_refused_event_raises_as_parse_event_does() -> None:
    obj = {**BASE, "attrs": {"error": "x"}}
    with pytest.raises(EventError) as expected:
        parse_event(obj)
    with pytest.raises(EventError) as got:
        parse_event_body(obj)
    assert got.value.problems == expected.value.problems


def test_every_workload_event_and_the_fast_path_taken() -> None:
    items = orjson.loads(orjson.dumps(mixed(3000, prefix="body", seed=3)))
    for obj in items:
        assert parse_event_body(obj) == _reference(obj)
    canonical = [obj for obj in items if event_body._is_canonical(obj, parse_event(obj))]
    assert len(canonical) == len(items)  # the workload sends canonical events: the object is serialized as sent


def test_the_schema_admits_only_what_to_dict_writes() -> None:
    # The premise of serializing the object as sent: no envelope field that to_dict would leave out or rename.
    full = {**BASE, "gpu": 1, "gpu_uuid": "GPU-1", "pid": 7, "job": "j", "rank": 0, "labels": {"a": "b"},
            "source": "nvml", "message": "m", "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "span_id": "b7ad6b7169203331"}
    assert set(_envelope_schema()["properties"]) == set(parse_event(full).to_dict()) == set(full)
