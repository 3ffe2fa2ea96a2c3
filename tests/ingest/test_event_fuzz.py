"""Issue 11, fuzzing the event validator and ingest with Hypothesis: arbitrary JSON, and valid events with fields
swapped for arbitrary values, never raise anything but EventError; every accepted event round-trips through
strict JSON and through storage on SQLite and PostgreSQL; over HTTP nothing answers 5xx.

CI runs a short smoke run; GPUSLO_FUZZ_EXAMPLES sets the examples per property for a longer run
(docs/api.md#fuzzing has the command and the last long run's counts).
"""

from __future__ import annotations

import itertools
import json
import os
from datetime import UTC, datetime
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import event as tally
from hypothesis import strategies as st
from ingest_support import Live, clear_rows, now_time

from gpuslo.engine.errors import EventError
from gpuslo.engine.events import KIND_ATTRS, canonical_json, parse_event
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database

EXAMPLES = int(os.environ.get("GPUSLO_FUZZ_EXAMPLES", "300"))
_FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("GPUSLO_FUZZ_EXAMPLES"),
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_SERIAL = itertools.count()

_TEXT = st.text(st.characters(codec=None, blacklist_categories=()), max_size=12) | st.sampled_from(
    ["", "\x00", "\ud800", "a\udfff", "\u2028", "é", "0000:3b:00", "up", "allocator", "x" * 300])
_NUMBERS = (st.integers() | st.sampled_from([2**31, 2**63, -(2**63) - 1, 2**64, 10**30, 4_194_305, 0, -1])
            | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1e400, -1e400, 1e308, 5e-324]))
_TIMES = st.sampled_from(["0001-01-01T00:00:00Z", "1-01-01T00:00:00.000000Z", "1999-12-31T23:59:59Z",
                          "9999-12-31T23:59:59Z", "2026-11-30T12:00:00.123456789+02:00", "2026-02-30T00:00:00Z",
                          "2026-11-30T10:00:00+24:00", "2026-11-30T10:00:60Z", "2026-11-30 10:00:00Z"])
_SCALARS = st.none() | st.booleans() | _NUMBERS | _TEXT | _TIMES
JSON_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=12)
# Values a field may well hold, so that many mutated events are still accepted and go on to be stored.
PLAUSIBLE = (st.integers(0, 1000) | st.floats(0, 1e6) | st.text("abcé-_.:/", min_size=1, max_size=8)
             | st.sampled_from(["2000-01-01T00:00:00Z", "2026-11-30T12:00:00.123456789+02:00", "2026-11-30t10:00z",
                                "start", "up", "device", "ALLREDUCE", 0.65, 2**63 - 1, 4_194_304, 65_535, 1023]))
_FIELDS = sorted({"id", "kind", "time", "host", "gpu", "gpu_uuid", "pid", "job", "rank", "labels", "source",
                  "attrs", "message", "extra"} | {f"attrs.{a}" for attrs in KIND_ATTRS.values() for a in attrs}
                 | {"labels.team", "labels.\x00"})


def _base(kind: str) -> dict[str, Any]:
    attrs = {"gpu_xid": {"xid": 79}, "mem_fragmentation": {"fragmentation_ratio": 0.5},
             "token_stall": {"gap_ms": 1.0}, "token_request": {"request_id": "r", "phase": "start"},
             "probe_status": {"probe": "nvml", "state": "up"}}.get(kind, {})
    return {"id": "fuzz", "kind": kind, "time": "2026-11-30T10:00:00Z", "host": "node-a", "attrs": dict(attrs)}


@st.composite
def event_like(draw: st.DrawFn) -> Any:
    """A valid event of any kind with a few fields replaced by arbitrary JSON, or any JSON value at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON_VALUES)
    kind = draw(st.sampled_from(sorted(KIND_ATTRS)))
    body = _base(kind)
    own = st.sampled_from([f"attrs.{a}" for a in KIND_ATTRS[kind]] + ["gpu", "pid", "rank", "job", "message"])
    for name in draw(st.lists(own | own | st.sampled_from(_FIELDS), max_size=3)):
        value = draw(PLAUSIBLE | JSON_VALUES)
        if name.startswith(("attrs.", "labels.")):
            outer, key = name.split(".", 1)
            if not isinstance(body.get(outer), dict):
                body[outer] = {}
            body[outer][key] = value
        else:
            body[name] = value
    return body


def _strict_round_trip(obj: Any) -> Any:
    """The event's canonical form through strict JSON text (no NaN or Infinity) and back."""
    text = json.dumps(obj, allow_nan=False)
    json.loads(text)
    return json.loads(canonical_json(obj), parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))


@_FUZZ
@given(item=event_like())
def test_the_validator_raises_only_event_errors_and_what_it_accepts_round_trips(item: Any, database: Database):
    try:
        event = parse_event(item)
    except EventError as exc:
        assert exc.problems and all(p.path and p.reason for p in exc.problems)
        tally("refused")
        return
    tally("accepted")
    again = parse_event(_strict_round_trip(event.to_dict()))
    assert again == event and again.body_hash() == event.body_hash()
    stored = parse_event({**event.to_dict(), "id": f"fuzz-{next(_SERIAL)}"})
    with database.session() as session:
        assert repository.store_events(session, [stored], now=datetime.now(UTC)) == ["accepted"]
    with database.session(readonly=True) as session:
        (read,) = [r for r in repository.unprocessed_events(session, 10_000) if r.event.id == stored.id]
    assert read.error is None and read.event == stored and read.event.body_hash() == stored.body_hash()


def _mutated_bodies() -> st.SearchStrategy[bytes]:
    """Raw request bodies: valid event texts with bytes swapped, cut or repeated, and arbitrary JSON texts."""
    valid = json.dumps([_base("gpu_xid") | {"time": now_time(-10)}]).encode()

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        raw = bytearray(valid)
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(raw) - 1))
            op = draw(st.sampled_from(["swap", "cut", "dup", "insert"]))
            if op == "swap":
                raw[at] = draw(st.integers(0, 255))
            elif op == "cut":
                del raw[at:at + draw(st.integers(1, 8))]
            elif op == "dup":
                raw[at:at] = raw[at:at + draw(st.integers(1, 16))]
            else:
                raw[at:at] = draw(st.sampled_from([b'"\\u0000"', b'"\\ud800"', b"1e400", b"NaN", b'"a":1,',
                                                   b"9" * 30, b"[" * 50, b"-0", b"{}", b'\xff', b"\\"]))
            if not raw:
                raw = bytearray(b"{")
        return bytes(raw)

    as_json = JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=True).encode())
    return mutate() | event_like().map(lambda v: json.dumps([v]).encode()) | as_json


@settings(_FUZZ, max_examples=max(25, EXAMPLES // 12))
@given(raw=_mutated_bodies())
def test_no_request_body_makes_the_server_answer_5xx(raw: bytes, live: Live):
    response = httpx.post(f"{live.url}/api/v1/events", content=raw, headers={"Content-Type": "application/json"},
                          timeout=30)
    assert response.status_code < 500, (raw[:200], response.text[:500])
    tally(f"HTTP {response.status_code}")
    json.loads(response.text, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))
    listing = live.get("/api/v1/events?page_size=50")
    assert listing.status_code == 200
    json.loads(listing.text, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))
    if live.events("page_size=1")["total"] > 200:
        clear_rows(live.core.database)
