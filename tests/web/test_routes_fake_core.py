"""Request parsing and status mapping of POST /api/v1/events, schema, health and metrics on a FakeCore."""

from __future__ import annotations

import io
import json

import pytest

from gpuslo.engine.errors import StoreError
from gpuslo.engine.events import SCHEMA_ID


def _event(event_id: str = "e-1", **attrs: object) -> dict:
    return {"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": "node-1",
            "gpu": 0, "attrs": {"fragmentation_ratio": 0.5, **attrs}}


def _post(client, body: object, content_type: str = "application/json", **kwargs):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/api/v1/events", data=data, content_type=content_type, **kwargs)


def _envelope(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    error = response.get_json()["error"]
    assert (error["status"], error["code"]) == (status, code)
    return error


def test_single_accepted_then_duplicate_then_conflict(fake_client):
    first = _post(fake_client, _event())
    assert first.status_code == 202
    assert first.get_json() == {"accepted": 1, "duplicate": 0, "rejected": 0, "conflict": 0,
                                "results": [{"index": 0, "id": "e-1", "status": "accepted", "problems": []}]}
    assert _post(fake_client, _event()).status_code == 200
    conflict = _post(fake_client, _event(alloc_retries=3))
    assert conflict.status_code == 409
    assert conflict.get_json()["results"][0]["problems"][0]["field"] == "id"


def test_single_invalid_is_422_with_field_paths(fake_client):
    response = _post(fake_client, {"id": "x", "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z",
                                   "host": "h", "attrs": {"fragmentation_ratio": 7}})
    assert response.status_code == 422
    problems = response.get_json()["results"][0]["problems"]
    assert problems[0]["field"] == "attrs.fragmentation_ratio"


def test_ndjson_bad_line_is_rejected_and_others_go_in(fake_client, fake_core):
    lines = [json.dumps(_event("a")), "", "{not json", json.dumps(_event("b"))]
    response = _post(fake_client, "\n".join(lines).encode(), "application/x-ndjson")
    assert response.status_code == 200
    out = response.get_json()
    assert [(r["index"], r["status"]) for r in out["results"]] == [(0, "accepted"), (1, "rejected"),
                                                                    (2, "accepted")]
    assert "line 3" in out["results"][1]["problems"][0]["reason"]
    assert fake_core.calls == [[_event("a"), _event("b")]]


def test_ndjson_all_lines_bad_never_calls_the_core(fake_client, fake_core):
    response = _post(fake_client, b"{\n[\n", "application/x-ndjson")
    assert response.status_code == 422
    assert fake_core.calls == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "multipart/form-data"])
def test_wrong_content_type_is_415(fake_client, content_type):
    _envelope(_post(fake_client, _event(), content_type), 415, "unsupported_media_type")


def test_missing_content_type_is_415(fake_client):
    response = fake_client.post("/api/v1/events", data=b"{}")
    _envelope(response, 415, "unsupported_media_type")


def test_compressed_body_is_415(fake_client):
    response = _post(fake_client, _event(), headers={"Content-Encoding": "gzip"})
    _envelope(response, 415, "unsupported_encoding")


def test_bad_json_is_400_with_position(fake_client):
    error = _envelope(_post(fake_client, b'[{"id": "a"},\n {"id" "b"}]'), 400, "bad_json")
    assert error["details"] == [{"line": 2, "column": 8, "reason": "Expecting ':' delimiter"}]


def test_oversize_by_content_length_is_413(fake_client, fake_core):
    _envelope(_post(fake_client, b"[" + b" " * 5000 + b"]"), 413, "body_too_large")
    assert fake_core.calls == []


def test_oversize_chunked_body_is_413(fake_client, fake_core):
    # No Content-Length: the server terminates the stream, so only the bytes read can tell.
    stream = io.BytesIO(b"[" + b" " * 5000 + b"]")
    response = fake_client.post("/api/v1/events", input_stream=stream, content_type="application/json",
                                environ_overrides={"wsgi.input_terminated": True})
    _envelope(response, 413, "body_too_large")
    assert fake_core.calls == []


def test_chunked_body_within_the_limit_is_read_whole(fake_client, fake_core):
    body = json.dumps([_event("c1"), _event("c2")]).encode()
    response = fake_client.post("/api/v1/events", input_stream=io.BytesIO(body), content_type="application/json",
                                environ_overrides={"wsgi.input_terminated": True})
    assert response.status_code < 300
    assert [item["id"] for call in fake_core.calls for item in call] == ["c1", "c2"]


def test_too_many_items_is_413(fake_client, fake_core):
    error = _envelope(_post(fake_client, [_event(f"e{i}") for i in range(6)]), 413, "too_many_events")
    assert "limit is 5" in error["message"]
    assert fake_core.calls == []


def test_empty_array_is_422(fake_client):
    _envelope(_post(fake_client, []), 422, "empty_batch")


def test_unknown_api_route_and_method_are_json(fake_client):
    _envelope(fake_client.get("/api/v1/nope"), 404, "not_found")
    response = fake_client.get("/api/v1/events/x")
    assert response.status_code == 404 and response.get_json()["error"]["code"] == "not_found"
    error = _envelope(fake_client.put("/api/v1/events", json={}), 405, "method_not_allowed")
    assert error["message"]


def test_event_schema(fake_client):
    response = fake_client.get("/api/v1/schema/event")
    assert response.status_code == 200 and response.mimetype == "application/schema+json"
    assert json.loads(response.data)["$id"] == SCHEMA_ID


def test_security_headers_on_every_response(fake_client):
    for response in (fake_client.get("/api/v1/schema/event"), fake_client.get("/api/v1/nope")):
        assert response.headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"


def test_healthz_and_metrics(fake_client, fake_core):
    fake_core.metrics.engine_queue_depth.set(4)
    body = fake_client.get("/healthz").get_json()
    assert body == {"status": "ok", "database": "ok", "engine": {"status": "ok", "reason": None, "queue_depth": 4,
                                                                            "queue_size": 10_000},
                    "rulebooks": 0, "rulebook_errors": 0}
    metrics = fake_client.get("/metrics")
    assert metrics.status_code == 200 and metrics.mimetype == "text/plain"
    assert b"gpuslo_engine_queue_depth 4.0" in metrics.data


def test_healthz_is_503_when_the_database_is_unreachable(fake_client, fake_core):
    class Unreachable:
        def session(self, **_: object):
            raise StoreError("database transaction failed: connection refused")

    fake_core.database = Unreachable()
    response = fake_client.get("/healthz")
    assert response.status_code == 503
    assert response.get_json()["database"] == "unreachable"
