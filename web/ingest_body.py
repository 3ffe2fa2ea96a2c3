"""Turn a POST /api/v1/events body into decoded items: JSON (object or array) or NDJSON, bounded."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gpuslo.engine.errors import FieldProblem
from gpuslo.engine.ingest_types import ACCEPTED, CONFLICT, DUPLICATE, REJECTED, IngestReport, IngestResult
from gpuslo.web.errors import RequestError

JSON_TYPES = frozenset({"application/json"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson"})
# orjson turns integers beyond 64 bits into floats, json.loads keeps them exact; such an integer has at least
# 19 digits in a row, which a translate and a substring search find in a fraction of a parse's time.
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_DIGIT_RUN = b"0" * 19
_UNDECODED = object()


@dataclass(frozen=True)
class BadLine:
    """An NDJSON line that is not JSON; it becomes a rejected item, the other lines still count."""

    line: int
    problem: FieldProblem


@dataclass(frozen=True)
class Body:
    """The decoded items in body order; `single` when the body was one JSON object."""

    items: tuple[Any, ...]
    single: bool = False


class _NotJsonConstant(ValueError):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _reject_constant(name: str) -> Any:
    raise _NotJsonConstant(name)


def _position(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _loads(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, which are not JSON."""
    return json.loads(text, parse_constant=_reject_constant)


def _exact_with_orjson(raw: bytes) -> bool:
    """Whether orjson decodes `raw` to what json.loads gives wherever it succeeds (no integer beyond 64 bits)."""
    return _LONG_DIGIT_RUN not in raw.translate(_DIGITS_AS_ZERO)


def _fast_loads(raw: bytes | str) -> Any:
    """orjson's value (~2x faster), or _UNDECODED when it refuses: the stdlib path then gives the same value or
    the precise error (orjson also refuses some JSON that json.loads takes: a BOM, lone surrogates, deep nesting).
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNDECODED


def _json_problem(text: str, exc: Exception) -> tuple[str, int | None, int | None]:
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg, exc.lineno, exc.colno
    if isinstance(exc, _NotJsonConstant):
        found = text.find(exc.name)
        line, col = _position(text, found) if found >= 0 else (None, None)
        return f"{exc.name} is not valid JSON", line, col
    return "nesting is too deep", None, None


def _decode_text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, col = _position(raw[: exc.start].decode("utf-8", "replace"), exc.start)
        raise RequestError(400, "bad_encoding", f"body is not valid UTF-8 at byte {exc.start}",
                           [{"line": line, "column": col, "reason": exc.reason}]) from exc


def check_content_type(mimetype: str, charset: str | None) -> str:
    """The body format ("json" or "ndjson"); 415 for anything else or a charset other than UTF-8."""
    mimetype = (mimetype or "").lower()
    if mimetype not in JSON_TYPES | NDJSON_TYPES:
        shown = mimetype or "(none)"
        raise RequestError(415, "unsupported_media_type",
                           f"Content-Type {shown} is not accepted; send application/json "
                           "(one event or an array) or application/x-ndjson (one event per line)")
    if charset and charset.lower().replace("_", "-") not in {"utf-8", "utf8"}:
        raise RequestError(415, "unsupported_charset", f"charset {charset} is not accepted; send UTF-8")
    return "json" if mimetype in JSON_TYPES else "ndjson"


def _stdlib_json(raw: bytes) -> Any:
    text = _decode_text(raw)
    try:
        return _loads(text)
    except (ValueError, RecursionError) as exc:
        message, line, col = _json_problem(text, exc)
        where = f" at line {line}, column {col}" if line is not None else ""
        raise RequestError(400, "bad_json", f"malformed JSON{where}: {message}",
                           [{"line": line, "column": col, "reason": message}]) from exc


def parse_json_body(raw: bytes) -> Body:
    """One event object or an array of items; 400 with line and column when the JSON is malformed."""
    value = _fast_loads(raw) if _exact_with_orjson(raw) else _UNDECODED
    if value is _UNDECODED:
        value = _stdlib_json(raw)
    if isinstance(value, dict):
        return Body((value,), single=True)
    if isinstance(value, list):
        return Body(tuple(value))
    raise RequestError(400, "bad_body", "body must be one event object or an array of events, "
                       f"not a JSON {type(value).__name__}")


def parse_ndjson_body(raw: bytes) -> Body:
    """One item per non-blank line; a line that is not JSON becomes a BadLine, not a failed request."""
    text = _decode_text(raw)
    exact = _exact_with_orjson(raw)
    items: list[Any] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        value = _fast_loads(line) if exact else _UNDECODED
        if value is not _UNDECODED:
            items.append(value)
            continue
        try:
            items.append(_loads(line))
        except (ValueError, RecursionError) as exc:
            message, _, col = _json_problem(line, exc)
            where = f", column {col}" if col is not None else ""
            items.append(BadLine(number, FieldProblem(f"(line {number})",
                                                      f"malformed JSON at line {number}{where}: {message}")))
    return Body(tuple(items))


def parse_body(raw: bytes, body_format: str, max_items: int) -> Body:
    """Decode the body and enforce the item limits: 422 when empty, 413 when over `max_items`."""
    body = parse_json_body(raw) if body_format == "json" else parse_ndjson_body(raw)
    if not body.items:
        raise RequestError(422, "empty_batch", "the body holds no events")
    if len(body.items) > max_items:
        raise RequestError(413, "too_many_events",
                           f"{len(body.items)} events in one request; the limit is {max_items}")
    return body


def merge_results(body: Body, report: IngestReport) -> tuple[IngestResult, ...]:
    """Results in body order: the core's verdicts for decoded items, rejections for bad NDJSON lines."""
    if len(report.results) == len(body.items):  # no bad lines: the core's indexes are the body's
        return report.results
    verdicts = iter(report.results)
    merged = []
    for index, item in enumerate(body.items):
        if isinstance(item, BadLine):
            merged.append(IngestResult(index, None, REJECTED, (item.problem,)))
        else:
            result = next(verdicts)
            merged.append(IngestResult(index, result.id, result.status, result.problems))
    return tuple(merged)


def decodable(body: Body) -> list[Any]:
    """The items to hand to the core (bad NDJSON lines left out)."""
    return [item for item in body.items if not isinstance(item, BadLine)]


def response_status(results: Sequence[IngestResult], single: bool) -> int:
    """202/200/409/422 for a single object; 200 if any item went in, else 409 or 422 for a batch."""
    statuses = [r.status for r in results]
    if single:
        return {ACCEPTED: 202, DUPLICATE: 200, CONFLICT: 409}.get(statuses[0], 422)
    if any(s in (ACCEPTED, DUPLICATE) for s in statuses):
        return 200
    return 409 if all(s == CONFLICT for s in statuses) else 422


def response_body(results: Sequence[IngestResult]) -> dict[str, Any]:
    """The JSON answer: counts per status and one entry per item."""
    counts = dict.fromkeys((ACCEPTED, DUPLICATE, REJECTED, CONFLICT), 0)
    for result in results:
        counts[result.status] += 1
    return {
        **counts,
        "results": [
            {"index": r.index, "id": r.id, "status": r.status,
             "problems": [{"field": p.path, "reason": p.reason} for p in r.problems]}
            for r in results
        ],
    }


def response_json(results: Sequence[IngestResult]) -> bytes:
    """`response_body` as JSON text (keys sorted, like Flask's jsonify), by orjson: the answer lists every item."""
    return orjson.dumps(response_body(results), option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)
