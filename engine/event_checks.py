"""What JSON Schema cannot say about an event: finite numbers, clean Unicode text, RFC 3339 times within bounds.

Every accepted event must be evaluable, storable on both databases, servable as strict JSON and renderable;
these checks (and the integer ranges in the schema, `INT_RANGES`) are what makes that so. Each problem carries
a code from `REASONS`, the fixed label set of the rejected-events metric.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType

from gpuslo.engine.errors import FieldProblem

# The reasons an event is refused: a fixed set, so the metric's label never carries a raw value.
REASONS: tuple[str, ...] = (
    "missing_field", "unknown_field", "wrong_type", "out_of_range", "too_long", "bad_value", "bad_text",
    "not_finite", "bad_time", "time_too_old", "time_in_future", "duplicate_key", "malformed_json", "conflict",
    "store_failed", "invalid",
)
# jsonschema's keyword → reason.
SCHEMA_REASONS: Mapping[str, str] = MappingProxyType({
    "required": "missing_field", "additionalProperties": "unknown_field", "type": "wrong_type",
    "minimum": "out_of_range", "maximum": "out_of_range", "maxLength": "too_long", "minLength": "bad_value",
    "maxProperties": "too_long", "enum": "bad_value", "pattern": "bad_value", "propertyNames": "bad_value",
})

INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)
# Linux's PID_MAX_LIMIT (2^22 on 64-bit): no process id is larger, in any namespace.
PID_MAX = 4_194_304
# Ranges of the integer fields, by name: the database column type (INTEGER is 32-bit on PostgreSQL) and the
# field's meaning. Attributes not listed here are 64-bit (they live in the JSON body and in facts for the C core).
INT_RANGES: Mapping[str, tuple[int, int]] = MappingProxyType({
    "gpu": (0, 1023), "pid": (0, PID_MAX), "rank": (0, INT32[1]),
    "xid": (1, 65_535),  # NVIDIA's Xid numbers are small positive codes (the driver's table stops near 200)
    "error_code": INT32,  # cudaError_t / CUresult / ncclResult_t are C enums
})
NON_NEGATIVE_INTS = frozenset({"tokens", "stalls", "seq", "dropped", "token_index", "requests", "numel",
                               "alloc_retries", "segments", "num_ooms"})

TIME_FLOOR = datetime(2000, 1, 1, tzinfo=UTC)
TIME_MAX_LENGTH = 64
# RFC 3339 date-time: any number of fractional digits (Go and Falco write 9), `Z` or a numeric offset.
TIME_PATTERN = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:[Zz]|([+-])(\d{2}):(\d{2}))")


def int_range(name: str) -> tuple[int, int]:
    """The accepted range of an integer field or attribute."""
    if name in INT_RANGES:
        return INT_RANGES[name]
    if name in NON_NEGATIVE_INTS or name.endswith(("_bytes", "_ms", "_us", "_s")):
        return (0, INT64[1])
    return INT64


def parse_time(text: str) -> datetime:
    """An RFC 3339 date-time → aware UTC datetime, truncated to microseconds; ValueError saying why not."""
    found = _TIME.fullmatch(text)
    if found is None:
        raise ValueError("expected YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM)")
    year, month, day, hour, minute, second, fraction, sign, off_h, off_m = found.groups()
    offset = timedelta(0)
    if sign is not None:
        if int(off_h) > 23 or int(off_m) > 59:
            raise ValueError(f"offset {sign}{off_h}:{off_m} is not a valid UTC offset")
        offset = (1 if sign == "+" else -1) * timedelta(hours=int(off_h), minutes=int(off_m))
    micro = int((fraction or "0")[:6].ljust(6, "0"))
    local = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro,
                     tzinfo=timezone(offset))
    if local.year == 1 and offset > timedelta(0) or local.year == 9999 and offset < timedelta(0):
        raise ValueError("the time is outside the years 1..9999 in UTC")
    return local.astimezone(UTC)


def time_problem(text: str) -> tuple[datetime | None, FieldProblem | None]:
    """The parsed time, or the problem with it."""
    try:
        return parse_time(text), None
    except (ValueError, OverflowError) as exc:
        return None, FieldProblem("time", f"not a valid RFC 3339 time: {exc}", "bad_time")


def _show(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")  # %Y does not pad year 1


def bounds_problem(moment: datetime, now: datetime, skew_s: float) -> FieldProblem | None:
    """Ingest's bounds of an event time: not before TIME_FLOOR, not beyond the wall clock `now` plus the allowed
    clock skew. (Not part of parse_event: probes and tests build events on clocks of their own.)"""
    if moment < TIME_FLOOR:
        return FieldProblem("time", f"{_show(moment)} is before {TIME_FLOOR:%Y-%m-%dT%H:%M:%SZ}, the "
                            "earliest time accepted", "time_too_old")
    if moment.timestamp() <= now.timestamp() + skew_s:
        return None
    return FieldProblem("time", f"{_show(moment)} is more than {skew_s:g} s ahead of this server's "
                        f"clock ({_show(now)}); see the max_clock_skew_seconds setting",
                        "time_in_future")


def _text_problem(path: str, text: str) -> FieldProblem | None:
    if "\x00" in text:
        return FieldProblem(path, f"contains a NUL character (\\u0000) at position {text.index(chr(0))}",
                            "bad_text")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return FieldProblem(path, f"contains a lone surrogate (\\u{ord(text[exc.start]):04x}) at position "
                                f"{exc.start}: not valid Unicode", "bad_text")
    return None


def value_problems(obj: object) -> list[FieldProblem]:
    """Non-finite numbers and bad text (NUL, lone surrogates) anywhere in a decoded object, keys included."""
    found: list[FieldProblem] = []
    stack: list[tuple[str, object]] = [("", obj)]
    while stack and len(found) < 20:
        path, value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                found.append(FieldProblem(path or "(event)", f"{value} is not a finite number", "not_finite"))
        elif isinstance(value, str):
            problem = _text_problem(path or "(event)", value)
            if problem:
                found.append(problem)
        elif isinstance(value, dict):
            for key, item in value.items():
                name = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and (problem := _text_problem(f"{path or '(event)'} key", key)):
                    found.append(problem)
                    continue
                stack.append((name, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
    return sorted(found, key=lambda p: p.path)


def _scalars_clean(values: Iterable[object]) -> bool:
    """Whether no string holds NUL or a character `_text_problem` refuses and no float is NaN or infinite (other
    values pass): one loop, the type tests inline (a call per value was most of the walk's time)."""
    isfinite = math.isfinite
    for value in values:
        kind = type(value)
        if kind is str:
            text: str = value  # type: ignore[assignment]
            if "\x00" in text or not (text.isascii() or _text_problem("", text) is None):
                return False
        elif kind is float and not isfinite(value):  # type: ignore[arg-type]
            return False
    return True


def values_clean(obj: dict[str, object]) -> bool:
    """Whether an event the schema accepted has no value `value_problems` refuses: the fast path's test. The
    schema fixed its shape (scalars, and the labels and attrs objects of scalars whose keys it checked), so a
    flat walk over values suffices."""
    if not _scalars_clean(obj.values()):  # the objects among them are neither strings nor floats: passed here
        return False
    for value in obj.values():
        if type(value) is dict and not _scalars_clean(value.values()):
            return False
    return True
