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
from sqlalchemy import JSON, Boolean, Column, Connection, Float, Insert, Integer, Update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import operators
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BinaryExpression, BindParameter
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
    unnest: _Unnest | None = None  # PostgreSQL's form of an INSERT ... RETURNING (insert_returning)
    recordset: _Recordset | None = None  # PostgreSQL's one-statement form of a plain INSERT or UPDATE (write_rows)

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

    def write_rows(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """An INSERT or UPDATE of one row, for many rows. PostgreSQL: one statement over json_populate_recordset
        of the rows as one JSON text dumped by orjson (psycopg's executemany sends a statement per row, and
        dumps an array parameter element by element in Python); times converted as for executemany, JSON
        columns nested as they are (json_text's orjson text, read back equal). Else, or where orjson refuses a
        row (an integer beyond 64 bits, a non-string key) or an UPDATE's rows repeat a key, the executemany."""
        if not rows:
            return
        found = self.recordset
        if found is not None and not found.returning and (
                found.key is None or len({row[found.key] for row in rows}) == len(rows)):
            text = self._rows_text(found, rows)
            if text is not None:
                connection.exec_driver_sql(found.sql, {"rows": text})
                return
        self.executemany(connection, rows)

    def _rows_text(self, found: _Recordset, rows: Sequence[Mapping[str, Any]]) -> str | None:
        """The rows as one JSON array for json_populate_recordset (times converted, JSON columns nested), or
        None where orjson refuses a value."""
        convert = dict((name, function) for name, function in self.convert if function is not json_text)
        steps = [(name, column, convert.get(name)) for name, column in found.names]
        converted = [{column: row[name] if function is None else function(row[name])
                      for name, column, function in steps} for row in rows]
        try:
            return orjson.dumps(converted).decode()
        except TypeError:  # orjson.JSONEncodeError
            return None

    def insert_returning(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """An INSERT ... VALUES (...) RETURNING of one row, for many rows: on SQLite one multi-row VALUES
        statement per `_ROWS_PER_INSERT` rows (what SQLAlchemy's insertmanyvalues sends, without its per-row
        parameter machinery), on PostgreSQL one INSERT ... SELECT FROM json_populate_recordset of the rows as one
        JSON text (as write_rows), or where orjson refuses a row one INSERT ... SELECT FROM unnest (_Unnest).
        The RETURNING rows as the driver gives them, in no set order (no result processing: the caller returns
        only columns that need none, and keys them)."""
        recordset = self.recordset
        if recordset is not None and recordset.returning and rows:
            text = self._rows_text(recordset, rows)
            if text is not None:
                return [tuple(row) for row in connection.exec_driver_sql(recordset.sql, {"rows": text}).all()]
        if self.unnest is not None:
            return self.unnest.execute(connection, self.parameters(rows))
        if self.order is None:
            raise StoreError("driver SQL: a multi-row INSERT ... RETURNING needs a positional driver or unnest")
        head, values, tail = _values_split(self.sql)
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(rows), _ROWS_PER_INSERT):  # the row's group repeated, parameters flattened
            part = self.parameters(rows[start:start + _ROWS_PER_INSERT])
            sql = head + ", ".join([values] * len(part)) + tail
            flat = tuple(value for row in part for value in row)
            found.extend(tuple(row) for row in connection.exec_driver_sql(sql, flat).all())
        return found


@dataclass(frozen=True)
class _Unnest:
    """PostgreSQL: INSERT ... SELECT FROM unnest(one array per column) RETURNING, rows in the order given.
    One parameter per column whatever the number of rows, so psycopg parses the text once and the server
    prepares it; each column's list holds one Python type (psycopg dumps an array of one type only)."""

    sql: str
    columns: tuple[tuple[str, Convert | None], ...]

    def execute(self, connection: Connection, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        arrays = {name: [row[name] for row in rows] if kind is None else [kind(row[name]) for row in rows]
                  for name, kind in self.columns}
        return [tuple(row) for row in connection.exec_driver_sql(self.sql, arrays).all()]


def _float(value: Any) -> Any:
    return None if value is None else float(value)


def _int(value: Any) -> Any:
    return int(value) if type(value) is float and value.is_integer() else value


def _unnest(dialect: Dialect, statement: ClauseElement, keys: Sequence[str]) -> _Unnest | None:
    """The unnest form of a one-table INSERT ... RETURNING of plain columns, or None for another statement."""
    table = getattr(statement, "table", None)
    returning = getattr(statement, "_returning", ())
    if not isinstance(statement, Insert) or table is None or not returning:
        return None
    names = [column.name for column in returning]
    if any(getattr(column, "table", None) is not table for column in returning):
        raise StoreError(f"driver SQL: the insert into {table.name} returns columns of another table")
    kinds: list[tuple[str, Convert | None]] = []
    for key in keys:
        kind = table.c[key].type
        kinds.append((key, _float if isinstance(kind, Float) else _int if isinstance(kind, Integer) else None))
    quote = dialect.identifier_preparer.quote
    columns = ", ".join(quote(key) for key in keys)
    arrays = ", ".join(f"CAST(%({key})s AS {table.c[key].type.compile(dialect)}[])" for key in keys)
    sql = (f"INSERT INTO {quote(table.name)} ({columns}) SELECT * FROM unnest({arrays}) "
           f"RETURNING {', '.join(quote(name) for name in names)}")
    return _Unnest(sql, tuple(kinds))


_ROWS_PER_INSERT = 100  # rows per multi-row INSERT: ~40 columns each stays far below both drivers' limits


def _values_split(sql: str) -> tuple[str, str, str]:
    """An `INSERT ... VALUES (...) RETURNING ...` text as its head (through `VALUES `), the one row's group and
    the rest (from ` RETURNING`)."""
    head, found, rest = sql.partition(" VALUES ")
    values, returning, tail = rest.partition(" RETURNING ")
    if not found or not returning or not (values.startswith("(") and values.endswith(")")):
        raise StoreError(f"driver SQL: not a one-row INSERT ... VALUES (...) RETURNING: {sql[:120]!r}")
    return head + found, values, returning + tail


@dataclass(frozen=True)
class ExpandingStatement:
    """A statement with expanding IN lists (`bindparam(..., expanding=True)`) compiled once per dialect, in
    place of SQLAlchemy's postcompile step (which renders and processes every item's parameter again per
    execution). SQLite (qmark): one `?` per item, rendered per execution. PostgreSQL: `= ANY (%(name)s)`
    with the list bound as one array, so the text is the same at every execution and psycopg parses it once
    (it re-parses every text over 4,096 characters or 50 parameters). Only scalar IN lists of values
    needing no bind processing are taken."""

    sql: str
    order: tuple[str, ...] | None  # positional drivers; None: named
    convert: tuple[tuple[str, Convert], ...]
    expanding: frozenset[str]

    def execute(self, connection: Connection, parameters: Mapping[str, Any]) -> Any:
        values = dict(parameters)
        for name, function in self.convert:
            values[name] = function(values[name])
        for name in self.expanding:
            if not values[name]:
                raise StoreError(f"driver SQL: the list {name!r} is empty")
        if self.order is None:  # named (PostgreSQL): each list is one array parameter
            return connection.exec_driver_sql(self.sql, {name: list(value) if name in self.expanding else value
                                                         for name, value in values.items()})
        sql, flat = self.sql, []
        for name in self.expanding:
            sql = sql.replace(f"__[POSTCOMPILE_{name}]", ", ".join(["?"] * len(values[name])))
        for name in self.order:
            if name in self.expanding:
                flat.extend(values[name])
            else:
                flat.append(values[name])
        return connection.exec_driver_sql(sql, tuple(flat))


_EXPANDING: dict[tuple[int, str, str], ExpandingStatement] = {}


def expanding_statement(dialect: Dialect, statement: ClauseElement) -> ExpandingStatement:
    """`statement` compiled for ExpandingStatement.execute (once per dialect; a module-level constant, cached
    by identity). Refuses a list whose items need bind processing, or a processed column this module does not
    convert."""
    cache_key = (id(statement), dialect.name, dialect.paramstyle)
    found = _EXPANDING.get(cache_key)
    if found is None:
        if dialect.paramstyle not in ("qmark", "pyformat"):
            raise StoreError(f"driver SQL: expanding lists in paramstyle {dialect.paramstyle!r} are not rendered")
        compiled: SQLCompiler = statement.compile(dialect=dialect)  # type: ignore[assignment]
        expanding = frozenset(name for name, bind in compiled.binds.items() if bind.expanding)
        processed = set(compiled._bind_processors) & expanding  # noqa: SLF001
        if processed:
            raise StoreError(f"driver SQL: the lists {sorted(processed)} need bind processing")
        plain = compile_driver_statement(dialect, statement, [n for n in compiled.binds if n not in expanding],
                                         compiled=compiled)
        sql = compiled.string
        for name in expanding:
            marker = f" IN (__[POSTCOMPILE_{name}])"
            if sql.count(marker) != 1 or f" NOT{marker}" in sql or f") IN (__[POSTCOMPILE_{name}])" in sql:
                raise StoreError(f"driver SQL: {name!r} is not one scalar IN list")
            if dialect.paramstyle == "pyformat":
                sql = sql.replace(marker, f" = ANY (%({name})s)")
        found = ExpandingStatement(sql, plain.order, plain.convert, expanding)
        _EXPANDING[cache_key] = found
    return found


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


def compile_driver_statement(dialect: Dialect, statement: ClauseElement, keys: Sequence[str], *,
                             compiled: SQLCompiler | None = None) -> DriverStatement:
    """`statement` compiled for executemany with these parameter keys, uncached (for a caller that caches by
    its own key); refuses a column whose bind processing this module does not do. `compiled`: the statement
    compiled already (expanding_statement's; its expanding lists are not in `keys`)."""
    if compiled is None:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys),  # type: ignore[assignment]
                                     for_executemany=True)
    assert compiled is not None
    if dialect.name not in ("sqlite", "postgresql"):
        raise StoreError(f"driver SQL: dialect {dialect.name!r} is not one the store runs on")
    time_of = sqlite_time if dialect.name == "sqlite" else postgresql_time
    convert: list[tuple[str, Convert]] = []
    processors: dict[str, Convert] = dict(compiled._bind_processors)  # type: ignore[arg-type]
    for name, processor in processors.items():
        if compiled.binds[name].expanding:  # rendered and checked by expanding_statement or driver_select
            continue
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
    if order is not None and set(order) - set(keys) - {n for n, b in compiled.binds.items() if b.expanding}:
        raise StoreError(f"driver SQL: the statement takes parameters not given: {sorted(set(order) - set(keys))}")
    postgresql = dialect.name == "postgresql"
    unnest = _unnest(dialect, statement, keys) if postgresql else None
    recordset = _recordset(dialect, statement, keys) if postgresql else None
    return DriverStatement(compiled.string, order, tuple(convert), unnest, recordset)


@dataclass(frozen=True)
class _Recordset:
    """PostgreSQL: a statement over json_populate_recordset(NULL::table, rows as JSON); `names`: each parameter
    and the column its JSON key names; `key`: an UPDATE's parameter of the row to change (None: an INSERT)."""

    sql: str
    names: tuple[tuple[str, str], ...]
    key: str | None = None
    returning: bool = False  # an INSERT ... RETURNING (insert_returning takes it; write_rows does not)


def _recordset(dialect: Dialect, statement: ClauseElement, keys: Sequence[str]) -> _Recordset | None:
    """The json_populate_recordset form of a one-table INSERT of plain columns (RETURNING columns of its table
    or nothing), or of an UPDATE of plain columns WHERE <column> = <parameter> returning nothing; None for
    another statement (an UPDATE ... RETURNING, a SELECT, ON CONFLICT, given values, a schema, a column keyed
    apart from its name, another WHERE)."""
    table: Any = getattr(statement, "table", None)
    if (not isinstance(statement, Insert | Update) or table is None or getattr(table, "schema", None) is not None
            or (statement._returning and not isinstance(statement, Insert))  # noqa: SLF001
            or getattr(statement, "_values", None)):
        return None
    quote = dialect.identifier_preparer.quote
    source = f"json_populate_recordset(NULL::{quote(table.name)}, %(rows)s::json)"
    if isinstance(statement, Insert):
        if (statement.select is not None or statement._post_values_clause is not None  # noqa: SLF001
                or statement._multi_values  # noqa: SLF001
                or any(key not in table.c or table.c[key].name != key for key in keys)):
            return None
        returning = statement._returning  # noqa: SLF001
        returned = [column for column in returning if isinstance(column, Column) and column.table is table]
        if len(returned) != len(returning):
            return None
        columns = ", ".join(quote(key) for key in keys)
        tail = f" RETURNING {', '.join(quote(column.name) for column in returned)}" if returned else ""
        return _Recordset(f"INSERT INTO {quote(table.name)} ({columns}) SELECT {columns} FROM {source}{tail}",
                          tuple((key, key) for key in keys), returning=bool(returning))
    where = statement.whereclause
    if not (isinstance(where, BinaryExpression) and where.operator is operators.eq
            and isinstance(where.right, BindParameter) and table.c.contains_column(where.left)):
        return None
    match, column = where.right.key, table.c[where.left.key].name
    changed = [key for key in keys if key != match]
    if match not in keys or column in changed or any(key not in table.c or table.c[key].name != key
                                                      for key in changed):
        return None
    name = quote(table.name)
    sets = ", ".join(f"{quote(key)} = r.{quote(key)}" for key in changed)
    return _Recordset(f"UPDATE {name} SET {sets} FROM {source} AS r WHERE {name}.{quote(column)} = "
                      f"r.{quote(column)}", ((match, column), *((key, key) for key in changed)), match)
