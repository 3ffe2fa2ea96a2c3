"""The canonical JSON of an event and its hash stay byte for byte what stored events were hashed with."""

from __future__ import annotations

import hashlib
import json
import math
import random
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from gpuslo.engine.events import Event, body_digest, canonical_json, format_time, parse_event

# Hashes computed with the definition stored events carry (json.dumps(to_dict(), sort_keys=True,
# separators=(",", ":")), time through strftime) before orjson took over the common case.
GOLDEN = [
    ({"id": "golden-1", "kind": "mem_fragmentation", "time": "2026-11-29T12:00:01.5Z", "host": "node-7", "gpu": 3,
      "labels": {"team": "inférence", "zone": "b"}, "message": "FR \u2028 high\x7f",
      "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 1000, "largest_free_bytes": 290, "scope": "allocator"}},
     "05245d51a68c2b940581edeb5a60e102600429d4a4c1b869e70e8559e389858c"),
    ({"id": "golden-2", "kind": "mem_fragmentation", "time": "2026-11-29T12:00:01.5Z", "host": "node-7",
      "gpu": 2.0, "labels": {}, "message": None,
      "attrs": {"fragmentation_ratio": 1e-05, "free_bytes": 2**63 - 1, "largest_free_bytes": 0}},
     # 2**63 + 1 here before ingest refused integers beyond 64 bits (issue 11); this is the largest accepted
     "4857f98a3c04d368fc5a1d48d7d258df220501e418671c41c7d81877a43bc583"),
    ({"id": "golden-3", "kind": "token_latency", "time": "2026-11-29T12:00:02Z", "host": "node-1",
      "attrs": {"itl_p99_ms": 123.25, "tokens": 40}},
     "6c939ccb556ca463eddb49ee454895e8131311b081ec0352aabf05ad7302ec2d"),
]


def _reference(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize(("obj", "expected"), GOLDEN, ids=["non-ascii-and-del", "odd-numbers", "plain"])
def test_body_hash_of_known_events_is_unchanged(obj: dict[str, Any], expected: str) -> None:
    event = parse_event({key: value for key, value in obj.items() if value is not None})
    assert event.body_hash() == expected
    assert body_digest(event.to_dict()) == expected
    assert hashlib.sha256(_reference(event.to_dict()).encode()).hexdigest() == expected


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.random()
    if choice < 0.25:
        return rng.choice([0.0, -0.0, 1e-4, 9.99e-5, 1e16, 1e16 - 2, 2.0, 0.71, 5e-324, 1.5e300, math.nan,
                           math.inf, -math.inf, rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-25, 25)])
    if choice < 0.45:
        return rng.choice([0, -1, 7, 2**63 - 1, 2**63, 2**64, 2**70, -(2**63) - 1, True, False, None])
    if choice < 0.65:
        pieces = ["a", "é", "\x7f", "\x00", "\n", '"', "\\", "/", "\u2028", "\ud800", "😀", "Z"]
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))
    if choice < 0.75 and depth < 3:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if choice < 0.85 and depth < 3:
        keys = ["b", "a", "é", "A", "_", "aa", "\x7f"]
        return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return rng.choice(["node-1", 12, 0.5, (1, 2)])


def _outcome(function: Any, body: dict[str, Any]) -> Any:
    try:
        return function(body)
    except (TypeError, ValueError) as exc:
        return type(exc)


@pytest.mark.parametrize("seed", [1, 2])
def test_canonical_json_is_json_dumps_for_any_value(seed: int) -> None:
    rng = random.Random(seed)
    alike = unlike = 0
    for index in range(20_000):
        attrs = {f"k{i}": _random_value(rng) for i in range(rng.randint(0, 6))}
        body = {"id": f"e{index}", "kind": "k", "attrs": attrs}
        expected = _reference(body)
        assert canonical_json(body) == expected, body
        if expected == _outcome(lambda b: orjson.dumps(b, option=orjson.OPT_SORT_KEYS).decode(), body):
            alike += 1
        else:
            unlike += 1
    assert alike > 1000 and unlike > 1000  # bodies orjson writes the same and bodies it writes otherwise


def test_values_orjson_would_write_differently_fall_back() -> None:
    body = {"a": 1e-05, "b": 1e16, "c": "é", "d": "\x7f", "e": 2**64 + 1, "f": math.nan}
    for key, value in body.items():
        assert canonical_json({key: value}) == _reference({key: value})


def test_an_event_built_in_code_with_a_non_json_value_still_fails() -> None:
    event = Event(id="x", kind="gpu_xid", time=datetime(2026, 1, 1, tzinfo=UTC), host="h",
                  attrs={"xid": datetime(2026, 1, 1, tzinfo=UTC)})
    with pytest.raises(TypeError):
        event.body_hash()


def test_format_time_is_the_strftime_form() -> None:
    rng = random.Random(4)
    for _ in range(50_000):
        zone = timezone(timedelta(minutes=rng.randint(-14 * 60, 14 * 60)))
        moment = datetime(rng.randint(1000, 9998), rng.randint(1, 12), rng.randint(1, 28), rng.randint(0, 23),
                          rng.randint(0, 59), rng.randint(0, 59), rng.choice([0, rng.randint(0, 999_999)]),
                          tzinfo=rng.choice([UTC, zone]))
        assert format_time(moment) == moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_format_time_pads_early_years_to_rfc_3339() -> None:
    # Ingest refuses times before 2000 (issue 11); a row stored earlier prints as RFC 3339, not glibc's "999-".
    moment = datetime(1, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert format_time(moment) == "0001-01-02T03:04:05.000006Z"
