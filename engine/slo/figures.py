"""Window and lookback sums of every SLO group as of its SLO's newest minute, in two statements per request.

Each range is read as signed pieces of the minute, hour and day tables (engine/slo/ranges.py), so the cost per
group is bounded whatever the window holds; `recount` is the definition they are tested and benchmarked against
(every range summed from the minute buckets alone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuslo.engine.slo.counter import window_start_minute
from gpuslo.engine.slo.model import BUCKET_S, LOOKBACKS, Sli
from gpuslo.engine.slo.ranges import LEVELS, Piece, pieces
from gpuslo.engine.store.models import SloBucketRow

_B = SloBucketRow.__table__.c
_TABLES = ("slo_buckets", "slo_hours", "slo_days")  # by ranges.LEVELS
# The time-ordered covering index of each table. SQLite's planner (no statistics) would otherwise pick the
# group-ordered hours index for the GROUP BY and scan the SLO's every hour; PostgreSQL plans from statistics.
_TIME_INDEX = ("ix_slo_buckets_slo_id_minute", "ix_slo_hours_slo_id_hour", "ix_slo_days_slo_id_day")

Sums = dict[str, dict[str, list[int]]]  # group key → range name → [good, total, attributed]


def ranges(sli: Sli, now: int) -> dict[str, int]:
    """First minute of each lookback and of the budget window (`window`), as of minute `now`."""
    firsts = {name: now - seconds // BUCKET_S + 1 for name, seconds in LOOKBACKS}
    firsts["window"] = window_start_minute(sli, now)
    return firsts


def _driver_sql(session: Session, parts: list[str], slo_ids: list[str]) -> list[tuple[object, ...]]:
    """UNION ALL of `parts` (each with one `{mark}` for its SLO id) as driver SQL: no compile per request."""
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    sql = " UNION ALL ".join(part.format(mark=mark) for part in parts)
    return [tuple(row) for row in connection.exec_driver_sql(sql, tuple(slo_ids)).fetchall()]


def newest_minutes(session: Session, slo_ids: Sequence[str]) -> dict[str, int]:
    """Each SLO's newest counted minute (an index seek each); SLOs with no bucket are left out."""
    if not slo_ids:
        return {}
    parts = [f"SELECT {i}, (SELECT max(minute) FROM slo_buckets WHERE slo_id = {{mark}})" for i in range(len(slo_ids))]
    return {slo_ids[int(i)]: int(m) for i, m in _driver_sql(session, parts, list(slo_ids))  # type: ignore[call-overload]
            if m is not None}


def _piece_sums(session: Session, wanted: Sequence[tuple[str, Piece]]) -> dict[tuple[str, Piece], dict[str, list[int]]]:
    """(SLO, piece) → group key → [good, total, attributed]: one range scan per piece, all in one statement."""
    found: dict[tuple[str, Piece], dict[str, list[int]]] = {item: {} for item in wanted}
    if not wanted:
        return found
    hints = session.connection().dialect.name == "sqlite"
    parts = []
    for i, (_slo, piece) in enumerate(wanted):
        unit = LEVELS[piece.level][0]
        parts.append(f"SELECT {i}, group_key, sum(good), sum(total), sum(attributed) FROM {_TABLES[piece.level]}"
                     + (f" INDEXED BY {_TIME_INDEX[piece.level]}" if hints else "")
                     + f" WHERE slo_id = {{mark}} AND {unit} >= {int(piece.lo)} AND {unit} < {int(piece.hi)}"
                     " GROUP BY group_key")
    for index, key, good, total, attributed in _driver_sql(session, parts, [slo for slo, _ in wanted]):
        found[wanted[int(index)]][str(key)] = [int(good), int(total), int(attributed)]  # type: ignore[call-overload]
    return found


def figures(session: Session, slis: Sequence[Sli]) -> dict[str, tuple[int, Sums]]:
    """SLO id → (newest minute, its groups' sums of every range), for the SLIs with any bucket."""
    newest = newest_minutes(session, [sli.slo_id for sli in slis])
    split = {sli.slo_id: {name: pieces(first, newest[sli.slo_id] + 1, open_end=True)
                          for name, first in ranges(sli, newest[sli.slo_id]).items()}
             for sli in slis if sli.slo_id in newest}
    sums = _piece_sums(session, sorted({(slo, piece) for slo, named in split.items() for parts in named.values()
                                        for piece in parts}))
    out: dict[str, tuple[int, Sums]] = {}
    for slo, named in split.items():
        found: Sums = {}
        for name, parts in named.items():
            for piece in parts:
                for key, counts in sums[slo, piece].items():
                    total = found.setdefault(key, {}).setdefault(name, [0, 0, 0])
                    for j in range(3):
                        total[j] += piece.sign * counts[j]
        out[slo] = (newest[slo], found)
    return out


def recount(session: Session, slis: Sequence[Sli]) -> dict[str, tuple[int, Sums]]:
    """The same figures summed from the minute buckets alone, one query per range (the definition)."""
    out: dict[str, tuple[int, Sums]] = {}
    for sli in slis:
        now = session.execute(select(func.max(_B.minute)).where(_B.slo_id == sli.slo_id)).scalar()
        if now is None:
            continue
        found: Sums = {}
        for name, first in ranges(sli, now).items():
            rows = session.execute(select(_B.group_key, func.sum(_B.good), func.sum(_B.total), func.sum(_B.attributed))
                                   .where(_B.slo_id == sli.slo_id, _B.minute >= first, _B.minute <= now)
                                   .group_by(_B.group_key))
            for key, good, total, attributed in rows:
                found.setdefault(key, {})[name] = [int(good), int(total), int(attributed)]
        out[sli.slo_id] = (int(now), found)
    return out


def as_mapping(found: Mapping[str, tuple[int, Sums]]) -> dict[str, tuple[int, Sums]]:
    """Zero sums dropped, so figures and recount compare equal when a range of a group holds nothing."""
    return {slo: (now, {key: {name: c for name, c in named.items() if c != [0, 0, 0]} for key, named in sums.items()})
            for slo, (now, sums) in found.items()}
