"""The fast paths of POST /api/v1/events (orjson decoding, merged verdicts, the encoded answer, per-kind metrics)
give what the plain paths gave."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from prometheus_client import generate_latest

from gpuslo.engine.errors import FieldProblem
from gpuslo.engine.ingest_types import ACCEPTED, CONFLICT, REJECTED, IngestReport, IngestResult
from gpuslo.web.errors import RequestError
from gpuslo.web.ingest_body import BadLine, Body, merge_results, parse_body, response_body, response_json


def _stdlib(raw: bytes) -> Any:
    """What json.loads makes of a body, or the RequestError code parse_body must answer with."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return "bad_encoding"
    try:
        return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except (ValueError, RecursionError):
        return "bad_json"


def _parsed(raw: bytes) -> Any:
    try:
        body = parse_body(raw, "json", 10_000)
    except RequestError as exc:
        return exc.code
    return body.items[0] if body.single else list(body.items)


@pytest.mark.parametrize("raw", [
    b'[{"pid": 1180591620717411303424, "gpu": -9223372036854775809}]',  # orjson would make floats of these
    b'\xef\xbb\xbf{"id": "bom"}',
    b'{"id": "\\ud800 lone surrogate"}',
    b"[" * 1500 + b"]" * 1500,
    b'{"x": 1e400}',
])
def test_bodies_orjson_refuses_or_changes_decode_as_json_loads_does(raw: bytes) -> None:
    expected = _stdlib(raw)
    assert repr(_parsed(raw)) == repr(expected)  # the same error code, or the same value: ints stay ints


def test_long_integers_stay_exact_in_ndjson() -> None:
    body = parse_body(b'{"id": "a", "pid": 18446744073709551617}\n{"id": "b", "gpu": 2.0}\n', "ndjson", 10)
    assert body.items == ({"id": "a", "pid": 18446744073709551617}, {"id": "b", "gpu": 2.0})
    assert type(body.items[0]["pid"]) is int and type(body.items[1]["gpu"]) is float


def test_random_bodies_decode_exactly_as_with_json_loads() -> None:
    rng = random.Random(9)
    base = json.dumps([{"id": "e-1", "kind": "gpu_xid", "time": "2026-01-01T00:00:00Z", "host": "h",
                        "attrs": {"xid": 79, "r": 0.71, "neg": -0.0, "t": "é\\n"}, "labels": {}}]).encode()
    alphabet = b' \t\n{}[]":,.-+eE0123456789\\/ubtnfrx\x00\x7f\xff\xc3\xa9'
    decoded = 0
    for _ in range(5000):
        raw = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            spot = rng.randrange(len(raw))
            action = rng.random()
            if action < 0.4:
                raw[spot] = rng.choice(alphabet)
            elif action < 0.7:
                raw.insert(spot, rng.choice(alphabet))
            else:
                del raw[spot]
        expected = _stdlib(bytes(raw))
        got = _parsed(bytes(raw))
        if isinstance(expected, dict | list):
            assert repr(got) == repr(expected), raw
            decoded += 1
        else:  # the same error code; a scalar is JSON but not a body
            assert got == (expected if isinstance(expected, str) else "bad_body"), raw
    assert decoded > 500


def test_malformed_json_still_gets_json_loads_position() -> None:
    with pytest.raises(RequestError) as caught:
        parse_body(b'[{"id": "a"},\n {"id": }]', "json", 10)
    assert caught.value.details[0]["line"] == 2 and caught.value.details[0]["column"] == 9


def test_merged_results_keep_body_order_with_and_without_bad_lines() -> None:
    problem = FieldProblem("(line 2)", "malformed JSON at line 2")
    report = IngestReport((IngestResult(0, "a", ACCEPTED), IngestResult(1, "c", CONFLICT)))
    clean = merge_results(Body(({"id": "a"}, {"id": "c"})), report)
    assert clean == report.results
    mixed = merge_results(Body(({"id": "a"}, BadLine(2, problem), {"id": "c"})), report)
    assert mixed == (IngestResult(0, "a", ACCEPTED), IngestResult(1, None, REJECTED, (problem,)),
                     IngestResult(2, "c", CONFLICT))


def test_response_json_is_the_response_body_with_sorted_keys() -> None:
    results = (IngestResult(0, "é-1", ACCEPTED), IngestResult(1, None, REJECTED, (FieldProblem("gpu", "bad"),)))
    encoded = response_json(results)
    assert json.loads(encoded) == response_body(results)
    assert encoded.endswith(b"\n")
    decoded = json.loads(encoded)
    assert list(decoded) == sorted(decoded) and list(decoded["results"][0]) == sorted(decoded["results"][0])
    assert (decoded["accepted"], decoded["rejected"], decoded["duplicate"], decoded["conflict"]) == (1, 1, 0, 0)


def _event(event_id: str, kind: str = "gpu_xid", **changes: Any) -> dict[str, Any]:
    attrs = {"xid": 79} if kind == "gpu_xid" else {"probe": "nvml", "state": "up"}
    return {"id": event_id, "kind": kind, "time": "2026-11-29T12:00:00Z", "host": "node-1", "attrs": attrs,
            **changes}


def _sample(metrics: bytes, line_start: str) -> float:
    (line,) = [line for line in metrics.decode().splitlines() if line.startswith(line_start)]
    return float(line.rsplit(" ", 1)[1])


def test_metrics_count_each_event_once_per_kind_and_status(client: Any, core: Any) -> None:
    first = [_event(f"x{i}") for i in range(3)] + [_event(f"p{i}", "probe_status") for i in range(2)]
    assert client.post("/api/v1/events", json=first).status_code == 200
    again = [_event("x0"), _event("x1", host="elsewhere"), _event("bad", gpu=-1)]
    response = client.post("/api/v1/events", json=again)
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert [r["status"] for r in response.get_json()["results"]] == ["duplicate", "conflict", "rejected"]
    metrics = generate_latest(core.metrics.registry)
    assert _sample(metrics, 'gpuslo_events_accepted_total{kind="gpu_xid"}') == 3
    assert _sample(metrics, 'gpuslo_events_accepted_total{kind="probe_status"}') == 2
    assert _sample(metrics, 'gpuslo_events_duplicate_total{kind="gpu_xid"}') == 1  # a duplicate is no rejection
    assert _sample(metrics, 'gpuslo_events_rejected_total{kind="gpu_xid",reason="conflict"}') == 1
