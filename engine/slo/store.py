"""The SLI tables' writes: one batch's bucket deltas (minutes, hours and days) and the bad requests' causes, in the
engine's batch transaction; the seed that reloads a window into the counter; retention."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import Session

from gpuslo.engine.errors import StoreError
from gpuslo.engine.slo.attribution import OpenViolation, covers
from gpuslo.engine.slo.counter import SliBatch
from gpuslo.engine.slo.model import BUCKET_S, Sli
from gpuslo.engine.store.driver_sql import DriverStatement, compile_driver_statement
from gpuslo.engine.store.models import SloBucketRow, SloCauseRow, SloDayRow, SloHourRow, ViolationRow
from gpuslo.engine.store.rows import chunks

_B, _H, _D, _C, _V = (SloBucketRow.__table__.c, SloHourRow.__table__.c, SloDayRow.__table__.c,
                      SloCauseRow.__table__.c, ViolationRow.__table__.c)
_COUNTS = ("good", "total", "attributed")
# The roll-ups written beside the minutes in the same upsert: (table, unit column, minutes per unit).
ROLLUPS = ((SloHourRow, "hour", 60), (SloDayRow, "day", 1440))
_CANDIDATES = (select(_V.id, _V.rule_id, _V.slo, _V.host, _V.gpu, _V.group, _V.first_seen, _V.resolved_at)
               .where(_V.slo.in_(bindparam("slos", expanding=True)), _V.first_seen <= bindparam("last"),
                      or_(_V.resolved_at.is_(None), _V.resolved_at >= bindparam("first")),
                      _V.rule_id.not_in(bindparam("burn_rules", expanding=True))))


# (dialect, table, keys, counts, paramstyle): the paramstyle because psycopg2 and psycopg are both "postgresql".
_UPSERTS: dict[tuple[str, str, tuple[str, ...], tuple[str, ...], str], DriverStatement] = {}


def _upsert_statement(dialect: Dialect, table: Any, keys: tuple[str, ...], counts: tuple[str, ...]) -> DriverStatement:
    """The INSERT ... ON CONFLICT DO UPDATE adding the counts, compiled once per (dialect, table). SQLAlchemy
    cannot cache an ON CONFLICT statement (its cache key is None), so executing the built statement rebuilt its
    SET clause and recompiled it on every call: a quarter of the (d) fleet stream's samples."""
    key = (dialect.name, table.name, keys, counts, dialect.paramstyle)
    found = _UPSERTS.get(key)
    if found is None:
        statement = (postgresql if dialect.name == "postgresql" else sqlite).insert(table)
        statement = statement.on_conflict_do_update(
            index_elements=list(keys), set_={name: table.c[name] + statement.excluded[name] for name in counts})
        found = compile_driver_statement(dialect, statement, (*keys, *counts))
        if found.convert:  # the counts' columns are integers and text: sent as they are
            raise StoreError(f"the {table.name} upsert needs bind processing")
        _UPSERTS[key] = found
    return found


def _upsert(connection: Connection, table: Any, keys: tuple[str, ...], counts: tuple[str, ...],
            rows: list[dict[str, Any]]) -> None:
    """Add the rows' counts to the stored ones (SQLite and PostgreSQL spell the upsert alike), 500 a statement."""
    if not rows:
        return
    upsert = _upsert_statement(connection.dialect, table, keys, counts)
    for chunk in chunks(rows, 500):
        upsert.executemany(connection, chunk)


def _causes(connection: Connection, batch: SliBatch, burn_rules: Sequence[str]) -> dict[tuple[str, str, int, int], int]:
    """Bad requests per (slo, group, minute, violation) for the violations open for them."""
    if not batch.bad:
        return {}
    params = {"slos": sorted({b.slo_id for b in batch.bad}), "last": max(b.event.time for b in batch.bad),
              "first": min(b.event.time for b in batch.bad), "burn_rules": list(burn_rules) or ["-"]}
    candidates = [OpenViolation(r.id, r.rule_id, r.slo, r.host, r.gpu, r.group or {}, r.first_seen, r.resolved_at)
                  for r in connection.execute(_CANDIDATES, params)]
    found: dict[tuple[str, str, int, int], int] = {}
    for bad in batch.bad:
        charged = [v.id for v in candidates if covers(v, bad.slo_id, bad.event)]
        for violation_id in charged:
            key = (bad.slo_id, bad.group_key, bad.minute, violation_id)
            found[key] = found.get(key, 0) + 1
        if charged:
            batch.deltas[bad.slo_id, bad.group_key, bad.minute].append(1)
    return found


def record_sli(session: Session, batch: SliBatch | None, burn_rules: Sequence[str] = ()) -> None:
    """Add one engine batch's counts (after its matches, so violations it opened can be charged)."""
    if batch is None:
        return
    session.flush()
    connection = session.connection()
    causes = _causes(connection, batch, burn_rules)
    minutes: list[dict[str, Any]] = []
    rollups: list[dict[tuple[str, str, int], list[int]]] = [{} for _ in ROLLUPS]
    for (slo_id, key, minute), counts in batch.deltas.items():
        good, total, attributed = counts[0], counts[1], sum(counts[2:])
        minutes.append({"slo_id": slo_id, "group_key": key, "minute": minute, "good": good, "total": total,
                        "attributed": attributed})
        for found, (_table, _unit, size) in zip(rollups, ROLLUPS, strict=True):
            sums = found.setdefault((slo_id, key, minute // size), [0, 0, 0])
            sums[0] += good
            sums[1] += total
            sums[2] += attributed
    _upsert(connection, SloBucketRow.__table__, ("slo_id", "group_key", "minute"), _COUNTS, minutes)
    for found, (table, unit, _size) in zip(rollups, ROLLUPS, strict=True):
        _upsert(connection, table.__table__, ("slo_id", "group_key", unit), _COUNTS,
                [{"slo_id": s, "group_key": k, unit: u, "good": c[0], "total": c[1], "attributed": c[2]}
                 for (s, k, u), c in found.items()])
    _upsert(connection, SloCauseRow.__table__, ("slo_id", "group_key", "minute", "violation_id"), ("bad",),
            [{"slo_id": s, "group_key": k, "minute": m, "violation_id": v, "bad": n}
             for (s, k, m, v), n in causes.items()])


def stored_buckets(session: Session, sli: Sli) -> Iterable[tuple[str, int, int, int]]:
    """The stored (group key, minute, good, total) of an SLI's window as of its newest bucket (the seed)."""
    newest = session.execute(select(_B.minute).where(_B.slo_id == sli.slo_id).order_by(_B.minute.desc())
                             .limit(1)).scalar()
    if newest is None:
        return []
    first = newest - int(sli.retention_s()) // BUCKET_S
    rows = session.execute(select(_B.group_key, _B.minute, _B.good, _B.total)
                           .where(_B.slo_id == sli.slo_id, _B.minute >= first))
    return [tuple(row) for row in rows]


def prune(session: Session, slis: Sequence[Sli], now: datetime) -> int:
    """Drop buckets and causes older than each SLI's window plus the margin; returns the rows removed."""
    removed = 0
    for sli in slis:
        cutoff = int(now.timestamp() - sli.retention_s()) // BUCKET_S
        for table, column, limit in ((SloBucketRow, _B.minute, cutoff), (SloHourRow, _H.hour, cutoff // 60),
                                     (SloDayRow, _D.day, cutoff // 1440), (SloCauseRow, _C.minute, cutoff)):
            result = session.execute(delete(table).where(table.__table__.c.slo_id == sli.slo_id, column < limit))
            removed += result.rowcount or 0  # type: ignore[attr-defined]
    return removed
