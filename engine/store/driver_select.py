"""The SELECTs of the engine's write path as driver SQL (issue 17): expanding IN lists, of values or of tuples,
rendered without SQLAlchemy's postcompile step, and the rows converted by SQLAlchemy's own result processors.

Per execution SQLAlchemy renders and processes every item of an expanding list again, and on PostgreSQL psycopg
parses again every text over 4,096 characters or 50 parameters. Here the statement is compiled once per dialect.
SQLite (qmark): one `?` per item and a tuple list as `VALUES (?, ?), ...`, as SQLAlchemy renders them.
PostgreSQL: a list is one array, `= ANY (CAST(%(name)s AS type[]))`, and a tuple list one array per element,
`IN (SELECT * FROM unnest(CAST(%(name_0)s AS type[]), ...))`, so the text is the same at every execution. Each
result column goes through the processor SQLAlchemy would take for its type and the cursor's type code (times,
JSON, booleans), looked up once per statement and type codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import SelectBase
from sqlalchemy.sql.sqltypes import TupleType
from sqlalchemy.types import TypeEngine

from gpuslo.engine.errors import StoreError
from gpuslo.engine.store.driver_sql import Convert, compile_driver_statement

Processors = tuple[tuple[int, Convert], ...]


@dataclass(frozen=True)
class DriverSelect:
    """A SELECT compiled for one dialect: its SQL (on SQLite with the lists' markers left to render), the order of
    its parameters (positional drivers; None: named), the converted parameters, the constant binds, the lists
    (name -> tuple width, 0 for values) and the result columns' names and types."""

    sql: str
    order: tuple[str, ...] | None
    convert: tuple[tuple[str, Convert], ...]
    constants: Mapping[str, Any]
    lists: Mapping[str, int]
    names: tuple[str, ...]
    types: tuple[TypeEngine[Any], ...]
    dialect: Dialect
    # the result processors by the cursor's type codes, found at the first execution (as SQLAlchemy finds them)
    _processors: dict[tuple[Any, ...], Processors] = field(default_factory=dict, compare=False, repr=False)

    def rows(self, connection: Connection, parameters: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The statement's rows, each column as SQLAlchemy's result processing gives it."""
        values = {**self.constants, **parameters}
        for name, function in self.convert:
            values[name] = function(values[name])
        for name in self.lists:
            if not values[name]:
                raise StoreError(f"driver SQL: the list {name!r} is empty")
        result = connection.exec_driver_sql(*self._bound(values))
        description = result.cursor.description if result.cursor is not None else None
        codes = tuple(column[1] for column in description or ())
        processors = self._processors.get(codes)
        if processors is None:
            if len(codes) != len(self.types):
                raise StoreError(f"driver SQL: {len(codes)} result columns where {len(self.types)} were compiled")
            found = (kind._cached_result_processor(self.dialect, code)  # noqa: SLF001  # what SQLAlchemy takes
                     for kind, code in zip(self.types, codes, strict=True))
            processors = self._processors[codes] = tuple((i, p) for i, p in enumerate(found) if p is not None)
        if not processors:
            return [tuple(row) for row in result.all()]
        out = []
        for row in result.all():
            converted = list(row)
            for index, processor in processors:
                converted[index] = processor(converted[index])
            out.append(tuple(converted))
        return out

    def mappings(self, connection: Connection, parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`rows` as dicts by column name."""
        names = self.names
        return [dict(zip(names, row, strict=True)) for row in self.rows(connection, parameters)]

    def _bound(self, values: Mapping[str, Any]) -> tuple[str, Any]:
        if self.order is None:  # named (PostgreSQL): a list is one array, a tuple list one array per element
            bound: dict[str, Any] = {}
            for name, value in values.items():
                width = self.lists.get(name)
                if width is None:
                    bound[name] = value
                elif width == 0:
                    bound[name] = list(value)
                else:
                    for i in range(width):
                        bound[f"{name}_{i}"] = [item[i] for item in value]
            return self.sql, bound
        sql, flat = self.sql, []
        for name, width in self.lists.items():
            count = len(values[name])
            items = ", ".join(["?"] * count) if width == 0 else \
                "VALUES " + ", ".join(["(" + ", ".join(["?"] * width) + ")"] * count)
            sql = sql.replace(f"__[POSTCOMPILE_{name}]", items)
        for name in self.order:
            width = self.lists.get(name)
            if width is None:
                flat.append(values[name])
            elif width == 0:
                flat.extend(values[name])
            else:
                for item in values[name]:
                    if len(item) != width:
                        raise StoreError(f"driver SQL: {name!r}: {item!r} is not a {width}-tuple")
                    flat.extend(item)
        return sql, tuple(flat)


_SELECTS: dict[tuple[int, str, str], DriverSelect] = {}


def driver_select(dialect: Dialect, statement: SelectBase) -> DriverSelect:
    """`statement` compiled for DriverSelect.rows (once per dialect: a module-level constant, cached by
    identity). Refuses a list whose items need bind processing, an IN list it cannot render, or a processed
    parameter driver_sql does not convert."""
    cache_key = (id(statement), dialect.name, dialect.paramstyle)
    found = _SELECTS.get(cache_key)
    if found is None:
        found = _SELECTS[cache_key] = _compile(dialect, statement)
    return found


def _compile(dialect: Dialect, statement: SelectBase) -> DriverSelect:
    if dialect.paramstyle not in ("qmark", "pyformat"):
        raise StoreError(f"driver SQL: expanding lists in paramstyle {dialect.paramstyle!r} are not rendered")
    compiled: SQLCompiler = statement.compile(dialect=dialect)
    sql = compiled.string
    lists: dict[str, int] = {}
    for name, bind in compiled.binds.items():
        if not bind.expanding:
            continue
        processor: Any = compiled._bind_processors.get(name)  # noqa: SLF001
        kinds = bind.type.types if isinstance(bind.type, TupleType) else None
        if processor is not None and not (kinds is not None and all(p is None for p in processor)):
            raise StoreError(f"driver SQL: the list {name!r} needs bind processing")
        marker = f" IN (__[POSTCOMPILE_{name}])"
        if sql.count(marker) != 1 or f" NOT{marker}" in sql or (f"){marker}" in sql) != (kinds is not None):
            raise StoreError(f"driver SQL: {name!r} is not one IN list of {'tuples' if kinds else 'values'}")
        lists[name] = 0 if kinds is None else len(kinds)
        if dialect.paramstyle == "pyformat":
            if kinds is None:
                sql = sql.replace(marker, f" = ANY (CAST(%({name})s AS {bind.type.compile(dialect)}[]))")
            else:
                arrays = ", ".join(f"CAST(%({name}_{i})s AS {kind.compile(dialect)}[])" for i, kind in enumerate(kinds))
                sql = sql.replace(marker, f" IN (SELECT * FROM unnest({arrays}))")
    plain = [name for name, bind in compiled.binds.items() if not bind.expanding]
    converted = compile_driver_statement(dialect, statement, plain, compiled=compiled)
    used = set(converted.order) if converted.order is not None else {
        name for name in plain if f"%({name})s" in sql}
    constants = {name: bind.value for name, bind in compiled.binds.items()
                 if name in used and not bind.expanding and not bind.required}
    columns = compiled._result_columns  # noqa: SLF001
    return DriverSelect(sql, converted.order, converted.convert, constants, lists,
                        tuple(column[0] for column in columns), tuple(column[3] for column in columns), dialect)

