"""Turn a POST /api/v1/events body into decoded items: JSON (object or array) or NDJSON, bounded."""

from __future__ import annotations

import json
import re
import sys
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
# Every key of a JSON text ends with a quote followed by a colon; strings may hold that too, so more of these
# than keys decoded means "maybe a key repeats" (then the stdlib path looks), and as many means none does.
_KEY_ENDS = re.compile(r'"[ \t\r\n]*:')
_KEY_ENDS_BYTES = re.compile(rb'"[ \t\r\n]*:')
# json.loads refuses integers longer than Python's int_max_str_digits (4300) with a ValueError.
_LONG_NUMBER = re.compile(rf"-?\d{{{(sys.get_int_max_str_digits() or 4300) + 1},}}")


@dataclass(frozen=True)
class BadLine:
    """An item refused before validation (an NDJSON line that is not JSON, an object that repeats a key); it
    becomes a rejected item, the other items still count. `line`: the NDJSON line, None in a JSON body."""

    line: int | None
    problem: FieldProblem


class _Repeated(dict[str, Any]):
    """A decoded object that had a key more than once (object_pairs_hook): the first repeated key."""

    repeated: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    marked = _Repeated(obj)
    marked.repeated = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
    return marked


def _count_keys(value: Any) -> int:
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _repeated_key(value: Any) -> FieldProblem | None:
    """The first object inside `value` that repeats a key, as a problem naming its path."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, _Repeated):
            where = f"{path}.{item.repeated}" if path else item.repeated
            return FieldProblem(_printable(where), f"duplicate key {_printable(item.repeated)!r}: a JSON object "
                                "must not repeat a key (which value would count is undefined)", "duplicate_key")
        if isinstance(item, dict):
            stack.extend((f"{path}.{key}" if path else key, sub) for key, sub in item.items())
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", sub) for i, sub in enumerate(item))
    return None


def _printable(text: str) -> str:
    """`text` safe to write as JSON (lone surrogates and NULs escaped)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")


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
    """json.loads that refuses NaN and Infinity, which are not JSON, and marks objects that repeat a key."""
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs)


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
    if isinstance(exc, RecursionError):
        return "nesting is too deep", None, None
    long_number = _LONG_NUMBER.search(text)
    if long_number is not None:
        line, col = _position(text, long_number.start())
        digits = len(long_number.group().lstrip("-"))
        return f"a number of {digits} digits is too long to be a value of any event field", line, col
    return str(exc)[:200], None, None


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


def _marked(value: Any) -> Any:
    """The item, or a BadLine when an object inside it repeats a key."""
    problem = _repeated_key(value)
    return value if problem is None else BadLine(None, problem)


def _identity(value: Any) -> Any:
    return value


def parse_json_body(raw: bytes) -> Body:
    """One event object or an array of items; 400 with line and column when the JSON is malformed. An item
    with a repeated key is refused on its own (orjson keeps the last value silently: counting keys tells)."""
    value = _fast_loads(raw) if _exact_with_orjson(raw) else _UNDECODED
    if value is not _UNDECODED and len(_KEY_ENDS_BYTES.findall(raw)) != _count_keys(value):
        value = _UNDECODED
    # orjson's value with as many keys as the text has key ends repeats no key: only the stdlib path marks
    # objects that do (_pairs), so only its items need the walk that finds them (~7 % of a POST's CPU).
    mark = _identity if value is not _UNDECODED else _marked
    if value is _UNDECODED:
        value = _stdlib_json(raw)
    if isinstance(value, dict):
        return Body((mark(value),), single=True)
    if isinstance(value, list):
        return Body(tuple(map(mark, value)))
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
        if value is not _UNDECODED and len(_KEY_ENDS.findall(line)) == _count_keys(value):
            items.append(value)
            continue
        try:
            value = _loads(line)
            problem = _repeated_key(value)
            items.append(value if problem is None else BadLine(number, FieldProblem(
                problem.path, f"line {number}: {problem.reason}", problem.code)))
        except (ValueError, RecursionError) as exc:
            message, _, col = _json_problem(line, exc)
            where = f", column {col}" if col is not None else ""
            items.append(BadLine(number, FieldProblem(f"(line {number})",
                                                      f"malformed JSON at line {number}{where}: {message}",
                                                      "malformed_json")))
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


def refused_early(body: Body) -> list[FieldProblem]:
    """The problems of the items refused before the core saw them (for the rejected-events metric)."""
    return [item.problem for item in body.items if isinstance(item, BadLine)]


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
    """`response_body` as JSON text (keys sorted, like Flask's jsonify), by orjson: the answer lists every item.
    A problem naming a key that is not valid Unicode takes json.dumps, which escapes it."""
    body = response_body(results)
    try:
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)
    except TypeError:  # orjson.JSONEncodeError
        return (json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode()
