"""Core statements the engine's write path runs as executemany, compiled once per dialect and sent as driver SQL
with rows converted here (issue 17).

SQLAlchemy's executemany runs, per row and per column, its parameter machinery and each column type's bind
processor: for a violation's UPDATE or a history line, the JSON columns through `json.dumps` and every time
through `UTCDateTime` and then the dialect's own datetime processor. In the every-event-raises stream of
bench/engine.py (d) that was ~17 % of the process's GIL samples. Here the statement is compiled by SQLAlchemy
(so its SQL text is SQLAlchemy's own) and the columns that need processing are converted in one pass: JSON by
orjson (json.dumps where orjson refuses a value: an integer beyond 64 bits, a non-string key), an aware time,
a boolean and a float as SQLAlchemy would bind them. A statement with any other processed column is refused
when it is compiled, and each conversion but JSON's is checked against SQLAlchemy's own processor then.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import JSON, Boolean, Connection, Float
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store.models import UTCDateTime

Convert = Callable[[Any], Any]
_SQLITE_TIME = "%04d-%02d-%02d %02d:%02d:%02d.%06d"  # SQLAlchemy's SQLite DATETIME storage format
_PROBES = (datetime(2026, 12, 2, 8, 9, 10, 123456, tzinfo=UTC), datetime(2001, 1, 1, tzinfo=UTC),
           datetime.fromisoformat("2026-06-30T23:59:59.999999+05:30"))


def json_text(value: Any) -> str | None:
    """A JSON column's text: orjson's, or json.dumps's where orjson refuses the value (both read back equal)."""
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError: an integer beyond 64 bits, a non-string key, an unknown type
        return json.dumps(value)


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise StoreError(f"naive datetime {value.isoformat()} given; the store only takes aware times")
    return value


def sqlite_time(value: datetime | None) -> str | None:
    """An aware time as SQLAlchemy binds a UTCDateTime on SQLite: UTC, as its DATETIME storage text."""
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = _aware(value).astimezone(UTC)
    return _SQLITE_TIME % (value.year, value.month, value.day, value.hour, value.minute, value.second,
                           value.microsecond)


def postgresql_time(value: datetime | None) -> datetime | None:
    """An aware time as SQLAlchemy binds a UTCDateTime on PostgreSQL: the same instant in UTC."""
    if value is None:
        return None
    return value if value.tzinfo is UTC else _aware(value).astimezone(UTC)


def _flag(value: bool | None) -> int | None:
    """A boolean as SQLite's Boolean binds it: 1, 0 or NULL."""
    return None if value is None else int(value)


def _bool(value: bool | None) -> bool | None:
    """A boolean as PostgreSQL's Boolean binds it: as it is."""
    return value


def _same(ours: Any, theirs: Any) -> bool:
    return type(ours) is type(theirs) and ours == theirs


def _real(value: float | None) -> float | None:
    """A number as SQLite's Float binds it: a float."""
    return None if value is None else float(value)


@dataclass(frozen=True)
class DriverStatement:
    """A statement compiled for one dialect: its SQL, the order of its parameters (positional drivers such as
    sqlite3 take tuples; None: named, as psycopg takes dicts) and the converted columns."""

    sql: str
    order: tuple[str, ...] | None
    convert: tuple[tuple[str, Convert], ...]

    def parameters(self, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
        convert = self.convert
        if self.order is None and not convert:  # named and nothing to convert: the rows as they are
            return list(rows)
        if self.order is None:
            out: list[Any] = []
            for row in rows:
                values = dict(row)
                for name, function in convert:
                    values[name] = function(values[name])
                out.append(values)
            return out
        functions = dict(convert)
        steps = [(name, functions.get(name)) for name in self.order]
        return [tuple(row[name] if function is None else function(row[name]) for name, function in steps)
                for row in rows]

    def executemany(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            connection.exec_driver_sql(self.sql, self.parameters(rows))


_COMPILED: dict[tuple[int, str, str, tuple[str, ...]], DriverStatement] = {}


def driver_statement(dialect: Dialect, statement: ClauseElement, keys: Sequence[str]) -> DriverStatement:
    """`statement` compiled for executemany with these parameter keys (once per dialect and keys). The
    statement must be a module-level constant: the cache holds it by identity."""
    cache_key = (id(statement), dialect.name, dialect.paramstyle, tuple(keys))
    found = _COMPILED.get(cache_key)
    if found is None:
        found = compile_driver_statement(dialect, statement, keys)
        _COMPILED[cache_key] = found
    return found


def compile_driver_statement(dialect: Dialect, statement: ClauseElement, keys: Sequence[str]) -> DriverStatement:
    """`statement` compiled for executemany with these parameter keys, uncached (for a caller that caches by
    its own key); refuses a column whose bind processing this module does not do."""
    compiled: SQLCompiler = statement.compile(dialect=dialect, column_keys=list(keys),  # type: ignore[assignment]
                                              for_executemany=True)
    if dialect.name not in ("sqlite", "postgresql"):
        raise StoreError(f"driver SQL: dialect {dialect.name!r} is not one the store runs on")
    time_of = sqlite_time if dialect.name == "sqlite" else postgresql_time
    convert: list[tuple[str, Convert]] = []
    processors: dict[str, Convert] = dict(compiled._bind_processors)  # type: ignore[arg-type]
    for name, processor in processors.items():
        kind = compiled.binds[name].type
        if isinstance(kind, UTCDateTime):
            for probe in _PROBES:  # the conversion must bind what SQLAlchemy's own processor binds
                if time_of(probe) != processor(probe):
                    raise StoreError(f"driver SQL: {name}: {time_of(probe)!r} is not SQLAlchemy's "
                                     f"{processor(probe)!r}")
            convert.append((name, time_of))
        elif isinstance(kind, JSON):
            convert.append((name, json_text))
        elif isinstance(kind, Boolean | Float):
            probes: tuple[Any, ...] = (True, False, None) if isinstance(kind, Boolean) else (1.5, 2, None)
            candidates: tuple[Convert, ...] = (_flag, _bool) if isinstance(kind, Boolean) else (_real,)
            chosen: Convert | None = next(
                (c for c in candidates if all(_same(c(p), processor(p)) for p in probes)), None)
            if chosen is None:
                raise StoreError(f"driver SQL: {name}: the dialect binds {kind!r} in a way this module does not")
            convert.append((name, chosen))
        else:
            raise StoreError(f"driver SQL: {name} ({kind!r}) needs bind processing this module does not do")
    order = tuple(compiled.positiontup or ()) if compiled.positional else None
    if order is not None and set(order) - set(keys):
        raise StoreError(f"driver SQL: the statement takes parameters not given: {sorted(set(order) - set(keys))}")
    return DriverStatement(compiled.string, order, tuple(convert))
