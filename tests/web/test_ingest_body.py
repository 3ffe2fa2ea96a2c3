"""Request body → items, as pure functions: formats, limits, malformed JSON positions, status mapping."""

from __future__ import annotations

import pytest

from gpuslo.engine.errors import FieldProblem
from gpuslo.engine.ingest_types import ACCEPTED, CONFLICT, DUPLICATE, REJECTED, IngestReport, IngestResult
from gpuslo.web.errors import RequestError
from gpuslo.web.ingest_body import (
    BadLine,
    Body,
    check_content_type,
    decodable,
    merge_results,
    parse_body,
    response_body,
    response_status,
)


def _error(call, *args) -> RequestError:
    with pytest.raises(RequestError) as info:
        call(*args)
    return info.value


@pytest.mark.parametrize(("mimetype", "charset", "expected"), [
    ("application/json", None, "json"),
    ("Application/JSON", "utf-8", "json"),
    ("application/x-ndjson", None, "ndjson"),
    ("application/ndjson", "UTF-8", "ndjson"),
])
def test_accepted_content_types(mimetype, charset, expected):
    assert check_content_type(mimetype, charset) == expected


@pytest.mark.parametrize(("mimetype", "charset", "code"), [
    ("text/plain", None, "unsupported_media_type"),
    ("", None, "unsupported_media_type"),
    ("application/x-www-form-urlencoded", None, "unsupported_media_type"),
    ("application/json", "latin-1", "unsupported_charset"),
])
def test_refused_content_types_are_415(mimetype, charset, code):
    error = _error(check_content_type, mimetype, charset)
    assert (error.status, error.code) == (415, code)


def test_single_object_is_single():
    body = parse_body(b'{"id": "a"}', "json", 10)
    assert body == Body(({"id": "a"},), single=True)


def test_array_keeps_order_and_non_objects():
    body = parse_body(b'[{"id": "a"}, 3, {"id": "b"}]', "json", 10)
    assert body.items == ({"id": "a"}, 3, {"id": "b"}) and not body.single


@pytest.mark.parametrize(("raw", "line", "column"), [
    (b'{"id": "a",\n  "kind": }', 2, 11),
    (b"", 1, 1),
    (b"[1, 2", 1, 6),
    (b'{"x": NaN}', 1, 7),
])
def test_malformed_json_is_400_with_position(raw, line, column):
    error = _error(parse_body, raw, "json", 10)
    assert (error.status, error.code) == (400, "bad_json")
    assert error.details[0]["line"] == line and error.details[0]["column"] == column
    assert f"line {line}, column {column}" in error.message


def test_deep_nesting_is_400_not_a_crash():
    error = _error(parse_body, b"[" * 100_000 + b"]" * 100_000, "json", 10)
    assert (error.status, error.code) == (400, "bad_json")


def test_invalid_utf8_is_400():
    error = _error(parse_body, b'{"id": "\xff"}', "json", 10)
    assert (error.status, error.code) == (400, "bad_encoding")


def test_scalar_body_is_400():
    error = _error(parse_body, b'"hello"', "json", 10)
    assert (error.status, error.code) == (400, "bad_body")


@pytest.mark.parametrize(("raw", "fmt"), [(b"[]", "json"), (b"\n\n  \n", "ndjson")])
def test_empty_batch_is_422(raw, fmt):
    error = _error(parse_body, raw, fmt, 10)
    assert (error.status, error.code) == (422, "empty_batch")


@pytest.mark.parametrize(("raw", "fmt"), [(b"[1, 2, 3]", "json"), (b"1\n2\n\n3\n", "ndjson")])
def test_too_many_items_is_413(raw, fmt):
    error = _error(parse_body, raw, fmt, 2)
    assert (error.status, error.code) == (413, "too_many_events")
    assert "3 events" in error.message


def test_ndjson_bad_line_becomes_a_bad_item_with_its_line_number():
    body = parse_body(b'{"id": "a"}\n\n{"id": \n{"id": "c"}\n', "ndjson", 10)
    assert body.items[0] == {"id": "a"} and body.items[2] == {"id": "c"}
    bad = body.items[1]
    assert isinstance(bad, BadLine) and bad.line == 3
    assert bad.problem.path == "(line 3)" and "line 3, column 8" in bad.problem.reason
    assert decodable(body) == [{"id": "a"}, {"id": "c"}]


def test_merge_puts_core_verdicts_back_in_body_order():
    body = Body(({"id": "a"}, BadLine(2, FieldProblem("(line 2)", "bad")), {"id": "c"}))
    report = IngestReport((IngestResult(0, "a", ACCEPTED), IngestResult(1, "c", DUPLICATE)))
    merged = merge_results(body, report)
    assert [(r.index, r.id, r.status) for r in merged] == [(0, "a", ACCEPTED), (1, None, REJECTED),
                                                            (2, "c", DUPLICATE)]
    out = response_body(merged)
    assert (out["accepted"], out["duplicate"], out["rejected"], out["conflict"]) == (1, 1, 1, 0)
    assert out["results"][1]["problems"] == [{"field": "(line 2)", "reason": "bad"}]


def _results(*statuses: str) -> tuple[IngestResult, ...]:
    return tuple(IngestResult(i, str(i), s) for i, s in enumerate(statuses))


@pytest.mark.parametrize(("status", "code"), [(ACCEPTED, 202), (DUPLICATE, 200), (CONFLICT, 409),
                                              (REJECTED, 422)])
def test_single_object_status(status, code):
    assert response_status(_results(status), single=True) == code


@pytest.mark.parametrize(("statuses", "code"), [
    ((ACCEPTED, REJECTED), 200),
    ((DUPLICATE, CONFLICT), 200),
    ((CONFLICT, CONFLICT), 409),
    ((CONFLICT, REJECTED), 422),
    ((REJECTED,), 422),
])
def test_batch_status(statuses, code):
    assert response_status(_results(*statuses), single=False) == code
