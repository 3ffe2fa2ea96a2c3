"""The JSON API on the real core, SQLite and PostgreSQL: every bad-input class, no 5xx, no partial write."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from web_support import seed_violation

from gpuslo.engine.events import SCHEMA_ID, parse_event


def _event(event_id: str = "e-1", ratio: float = 0.5, **extra: Any) -> dict[str, Any]:
    return {"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": "node-1",
            "gpu": 0, "attrs": {"fragmentation_ratio": ratio}, **extra}


def _post(client, body: object, content_type: str = "application/json", **kwargs: Any):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = client.post("/api/v1/events", data=data, content_type=content_type, **kwargs)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    return response


def _error(response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert (error["status"], error["code"]) == (status, code)
    assert set(error) == {"status", "code", "message", "details"}
    return error


def _stored(client) -> dict[str, dict[str, Any]]:
    response = client.get("/api/v1/events?page_size=500")
    assert response.status_code == 200
    return {item["id"]: item for item in response.get_json()["items"]}


def test_single_event_accepted_is_stored(client):
    response = _post(client, _event())
    assert response.status_code == 202
    assert response.get_json()["results"] == [{"index": 0, "id": "e-1", "status": "accepted", "problems": []}]
    stored = _stored(client)
    assert list(stored) == ["e-1"] and stored["e-1"]["attrs"] == {"fragmentation_ratio": 0.5}
    assert stored["e-1"]["received_at"]


def test_same_id_same_body_is_duplicate_and_changes_nothing(client, core):
    _post(client, _event())
    assert core.wait_idle()  # the engine marks the event processed; after that nothing may change
    before = _stored(client)
    again = _post(client, _event())
    assert again.status_code == 200
    assert again.get_json()["duplicate"] == 1 and again.get_json()["accepted"] == 0
    assert _stored(client) == before


def test_same_id_other_body_is_409_and_keeps_the_first(client):
    _post(client, _event())
    conflict = _post(client, _event(ratio=0.9))
    assert conflict.status_code == 409
    assert conflict.get_json()["results"][0]["status"] == "conflict"
    assert _stored(client)["e-1"]["attrs"]["fragmentation_ratio"] == 0.5


def test_single_invalid_event_is_422_with_field_paths(client):
    response = _post(client, _event(ratio=1.5))
    assert response.status_code == 422
    problems = response.get_json()["results"][0]["problems"]
    assert [p["field"] for p in problems] == ["attrs.fragmentation_ratio"]
    assert _stored(client) == {}


def test_mixed_batch_reports_each_item_and_stores_only_valid_ones(client):
    batch = [_event("ok-1"), {"id": "bad-1", "kind": "nope"}, "not an object", _event("ok-2"),
             _event("bad-2", gpu=-1)]
    response = _post(client, batch)
    assert response.status_code == 200
    out = response.get_json()
    assert (out["accepted"], out["rejected"], out["duplicate"], out["conflict"]) == (2, 3, 0, 0)
    statuses = [r["status"] for r in out["results"]]
    assert statuses == ["accepted", "rejected", "rejected", "accepted", "rejected"]
    assert [r["index"] for r in out["results"]] == [0, 1, 2, 3, 4]
    assert any(p["field"] == "gpu" for p in out["results"][4]["problems"])
    assert set(_stored(client)) == {"ok-1", "ok-2"}


def test_batch_of_only_conflicts_is_409_and_only_invalid_is_422(client):
    _post(client, [_event("a"), _event("b")])
    assert _post(client, [_event("a", ratio=0.8), _event("b", ratio=0.8)]).status_code == 409
    assert _post(client, [{"id": "x"}, _event("a", ratio=0.8)]).status_code == 422


def test_ndjson_with_one_bad_line(client):
    body = "\n".join([json.dumps(_event("n-1")), "", '{"id": "n-2", ', json.dumps(_event("n-3")), ""])
    response = _post(client, body.encode(), "application/x-ndjson")
    assert response.status_code == 200
    results = response.get_json()["results"]
    assert [(r["index"], r["id"], r["status"]) for r in results] == [
        (0, "n-1", "accepted"), (1, None, "rejected"), (2, "n-3", "accepted")]
    assert "line 3" in results[1]["problems"][0]["reason"]
    assert set(_stored(client)) == {"n-1", "n-3"}


@pytest.mark.parametrize(("raw", "line", "column"), [
    (b'{"id": "e-1",\n "kind" "cuda_oom"}', 2, 9),
    (b'[{"id": "e-1"}, ]', 1, 17),
    (b"", 1, 1),
])
def test_bad_json_is_400_with_line_and_column(client, raw, line, column):
    error = _error(_post(client, raw), 400, "bad_json")
    assert (error["details"][0]["line"], error["details"][0]["column"]) == (line, column)
    assert _stored(client) == {}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/csv"])
def test_wrong_content_type_is_415(client, content_type):
    _error(_post(client, _event(), content_type), 415, "unsupported_media_type")
    assert _stored(client) == {}


def test_oversize_body_by_content_length_is_413(client):
    padding = "x" * (64 * 1024)
    _error(_post(client, _event(message=padding)), 413, "body_too_large")
    assert _stored(client) == {}


def test_oversize_body_without_content_length_is_413(client):
    stream = io.BytesIO(json.dumps([_event(f"c-{i}", message="y" * 4000) for i in range(18)]).encode())
    response = client.post("/api/v1/events", input_stream=stream, content_type="application/json",
                           environ_overrides={"wsgi.input_terminated": True})
    assert response.mimetype == "application/json"
    _error(response, 413, "body_too_large")
    assert _stored(client) == {}


def test_too_many_items_is_413_and_stores_nothing(client):
    _error(_post(client, [_event(f"m-{i}") for i in range(21)]), 413, "too_many_events")
    assert _stored(client) == {}


def test_empty_array_is_422(client):
    _error(_post(client, []), 422, "empty_batch")


@pytest.mark.parametrize("body", [
    b"null", b"42", b'"x"', b"[null]", b"[[]]", b'{"id": null}', b"[" * 5000, b'{"a": NaN}',
    b"\xff\xfe", b'{"id": "a", "kind": "cuda_oom", "time": "2025-13-45T99:99:99Z", "host": "h"}',
    b'{"id": "a", "kind": "cuda_oom", "time": "2025-01-01T00:00:00Z", "host": "h", "attrs": []}',
    b'{"id": "a", "kind": "cuda_oom", "time": "2025-01-01T00:00:00Z", "host": "h", "labels": {"1": 2}}',
])
def test_no_5xx_for_hostile_bodies(client, body):
    for content_type in ("application/json", "application/x-ndjson"):
        response = _post(client, body, content_type)
        assert 400 <= response.status_code < 500


def test_event_schema_is_served(client):
    response = client.get("/api/v1/schema/event")
    assert response.mimetype == "application/schema+json"
    assert json.loads(response.data)["$id"] == SCHEMA_ID


def test_events_listing_filters_and_pages(client):
    _post(client, [_event("p-1"), _event("p-2", host="node-2"), _event("p-3")])
    page = client.get("/api/v1/events?host=node-1").get_json()
    assert (page["total"], page["page_size"], page["has_next"]) == (2, 2, False)
    page = client.get("/api/v1/events?page=1").get_json()
    assert (page["total"], len(page["items"]), page["has_next"]) == (3, 2, True)
    _error(client.get("/api/v1/events?kind=bogus"), 400, "bad_query")
    _error(client.get("/api/v1/events?since=yesterday"), 400, "bad_query")


def test_violations_listing_detail_and_404(client, core):
    events = [parse_event(_event("v-1", ratio=0.71))]
    seeded = seed_violation(core.database, events)
    listing = client.get("/api/v1/violations?status=open&severity=warning&host=node-1&gpu=0").get_json()
    assert [item["id"] for item in listing["items"]] == [seeded.id]
    assert client.get("/api/v1/violations?status=resolved").get_json()["total"] == 0
    detail = client.get(f"/api/v1/violations/{seeded.id}").get_json()
    assert detail["explanation"]["conditions"][0]["observed"] == 0.71
    assert [e["id"] for e in detail["evidence"]] == ["v-1"]
    assert detail["history"][0]["action"] == "created"
    assert detail["first_seen"] == "2025-01-01T00:00:00.000000Z"
    _error(client.get("/api/v1/violations/999999"), 404, "not_found")
    _error(client.get("/api/v1/violations?status=closed"), 400, "bad_query")
    _error(client.get("/api/v1/violations?page_size=501"), 400, "bad_query")


def test_rulebooks_endpoint(client):
    body = client.get("/api/v1/rulebooks").get_json()
    assert set(body) == {"rulebooks", "problems", "loaded_at", "versions"}
    assert body["rulebooks"] == [] and body["problems"] == []


def test_unknown_routes_and_methods_are_json_envelopes(client):
    _error(client.get("/api/v1/nothing-here"), 404, "not_found")
    _error(client.delete("/api/v1/events"), 405, "method_not_allowed")


def test_healthz_and_metrics(client):
    _post(client, [_event("h-1"), {"id": "h-2"}])
    health = client.get("/healthz")
    assert health.status_code == 200
    body = health.get_json()
    assert (body["status"], body["database"]) == ("ok", "ok")
    assert (body["rulebooks"], body["rulebook_errors"]) == (0, 0)
    assert isinstance(body["engine"]["queue_depth"], int)
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.mimetype == "text/plain"
    assert b"accepted" in metrics.data and b"rejected" in metrics.data
