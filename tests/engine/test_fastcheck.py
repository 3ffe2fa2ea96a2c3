"""The compiled fast check of events agrees with jsonschema on random valid and invalid objects."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest

from gpuslo.engine import events
from gpuslo.engine.errors import EventError
from gpuslo.engine.events import KIND_ATTRS, KINDS, parse_event
from gpuslo.engine.fastcheck import compile_check

_NUMBERS = {"int": lambda r: r.choice([0, 1, 7, 1023, 1024, -1, 2**40]),
            "number": lambda r: r.choice([0, 0.5, 1.0, 0.71, -0.1, 3, 1e9])}
_ODD_VALUES: list[Any] = [None, True, False, 0, -1, 1.0, 2.5, -0.0, math.nan, math.inf, -math.inf, "", "x",
                          "a\n", "é" * 5, "x" * 1025, [], [1], {}, {"a": 1}, 1024, 2**70]


def _valid_attrs(rng: random.Random, kind: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for name, typ in KIND_ATTRS[kind].items():
        if rng.random() < 0.5:
            attrs[name] = _NUMBERS[typ](rng) if typ in _NUMBERS else rng.choice(["up", "allocator", "ok"])
    if kind == "mem_fragmentation":
        attrs["fragmentation_ratio"] = rng.random()
        attrs["scope"] = rng.choice(["allocator", "device"])
    elif kind == "token_stall":
        attrs["gap_ms"] = rng.uniform(0, 1000)
    elif kind == "gpu_xid":
        attrs["xid"] = rng.choice([48, 79, 94])
    elif kind == "probe_status":
        attrs.update(probe=rng.choice(["nvml", "ebpf"]), state=rng.choice(["up", "down", "degraded"]))
    elif kind == "token_request":
        attrs.update(request_id=f"req-{rng.randint(0, 99)}", phase=rng.choice(["start", "first_token", "error"]))
    return attrs


def _valid_event(rng: random.Random, index: int) -> dict[str, Any]:
    kind = rng.choice(KINDS)
    obj: dict[str, Any] = {"id": f"ev-{index}:{rng.randint(0, 9)}", "kind": kind,
                           "time": rng.choice(["2026-01-01T00:00:00Z", "2026-01-01T12:30:45.123456Z",
                                               "2026-01-01T00:00:00.5+00:00"]),
                           "host": f"node-{rng.randint(0, 63)}"}
    for name, value in (("gpu", rng.randint(0, 7)), ("pid", 4242), ("job", "train-1"), ("rank", 3),
                        ("source", "nvml"), ("gpu_uuid", "GPU-abc"), ("message", "hello")):
        if rng.random() < 0.4:
            obj[name] = value if rng.random() < 0.9 else None
    if rng.random() < 0.3:
        obj["labels"] = {f"l{i}": f"v{i}" for i in range(rng.randint(0, 4))}
    obj["attrs"] = _valid_attrs(rng, kind)
    return obj


def _mutate(rng: random.Random, obj: dict[str, Any]) -> dict[str, Any]:
    """One random change that may or may not make the event invalid."""
    out = copy.deepcopy(obj)
    attrs = out.get("attrs")
    target = attrs if rng.random() < 0.5 and isinstance(attrs, dict) and attrs else out
    choice = rng.random()
    if choice < 0.15 and target:
        del target[rng.choice(sorted(target))]
    elif choice < 0.25:
        target[rng.choice(["bogus", "GPU", "attrs2", "id"])] = rng.choice(_ODD_VALUES)
    elif choice < 0.35:
        out["labels"] = rng.choice([{"9bad": "x"}, {"ok": 1}, {f"k{i}": "v" for i in range(33)},
                                    {"a" * 63: "v"}, {"a" * 64: "v"}, {"ok": "v" * 257}, [], None])
    elif choice < 0.45:
        out[rng.choice(["id", "time", "host", "kind"])] = rng.choice(
            ["", "bad id", "ok\n", "x" * 129, "2026-01-01 00:00:00Z", "2026-01-01T00:00:00.1234567Z",
             "2026-13-45T99:99:99Z", "2026-01-01T00:00:00+01:00", "nope", "cuda_oom", 5, None])
    else:
        key = rng.choice(sorted(target)) if target else "gpu"
        target[key] = rng.choice(_ODD_VALUES)
    return out


def _objects(seed: int, count: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    found = []
    for index in range(count):
        obj = _valid_event(rng, index)
        for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
            obj = _mutate(rng, obj)
        found.append(obj)
    return found


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_check_accepts_exactly_what_jsonschema_accepts(seed: int) -> None:
    accepted = refused = 0
    for obj in _objects(seed, 1500):
        fast = events._ENVELOPE_OK(obj)
        assert fast == events._ENVELOPE_VALIDATOR.is_valid(obj), obj
        attrs = obj.get("attrs", {})
        if obj.get("kind") in KINDS:
            fast_attrs = events._ATTRS_OK[obj["kind"]](attrs)
            assert fast_attrs == events._ATTR_VALIDATORS[obj["kind"]].is_valid(attrs), obj
            fast = fast and fast_attrs
        accepted += fast
        refused += not fast
    assert accepted > 300 and refused > 300  # both sides of the check were exercised


def test_parse_event_problems_come_from_jsonschema_unchanged() -> None:
    obj = {"id": "bad id", "kind": "gpu_xid", "time": "2026-01-01T00:00:00Z", "host": "h", "attrs": {"xid": "79"}}
    with pytest.raises(EventError) as caught:
        parse_event(obj)
    assert [p.path for p in caught.value.problems] == ["id", "attrs.xid"]
    assert "does not match" in caught.value.problems[0].reason


def test_parse_event_accepts_integral_floats_as_jsonschema_does() -> None:
    obj = {"id": "e1", "kind": "gpu_xid", "time": "2026-01-01T00:00:00Z", "host": "h", "gpu": 2.0,
           "attrs": {"xid": 79}}
    assert parse_event(obj).gpu == 2.0


@pytest.mark.parametrize("schema", [{"type": "array"}, {"oneOf": [{"type": "string"}]}, {"enum": [1, 2]},
                                    {"patternProperties": {"a": {}}}])
def test_unsupported_keywords_refuse_to_compile(schema: dict[str, Any]) -> None:
    with pytest.raises((ValueError, KeyError)):
        compile_check(schema)
