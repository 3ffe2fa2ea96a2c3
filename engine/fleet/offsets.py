"""Where each partition stands: read the stored offset, and advance it in the batch's own transaction only if no
other owner wrote it since (compare-and-set on `version`), so a stale owner can never store a batch twice; every
partition of a batch in one or two statements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from gpuslo.engine.store.fleet_models import FleetPartitionRow

_T = FleetPartitionRow.__table__


@dataclass(frozen=True)
class Offset:
    """A partition's stored place: the last stream sequence applied, the newest event time then, the event time
    absences were checked to, and the write counter (0: never written)."""

    seq: int = 0
    watermark: float = 0.0
    clock: float = 0.0
    version: int = 0


def read(session: Session, partition: str) -> Offset:
    row = session.execute(select(_T.c.seq, _T.c.watermark, _T.c.clock, _T.c.version)
                          .where(_T.c.partition == partition)).first()
    return Offset() if row is None else Offset(int(row[0]), float(row[1]), float(row[2]), int(row[3]))


def advance(session: Session, partition: str, expected: int, offset: Offset, owner: str, now: datetime) -> bool:
    """Store `offset` (its version must be expected + 1) if the stored version is still `expected`; False when
    another owner wrote the partition meanwhile (the caller then rolls the whole batch back)."""
    return not advance_all(session, [(partition, expected, offset)], owner, now)


Move = tuple[str, int, Offset]  # (partition, the version read, the offset to store)

# One statement for every partition already written: compare-and-set on version, row by row.
_UPDATE = text(
    "UPDATE fleet_partitions AS t SET seq = v.seq, watermark = v.watermark, clock = v.clock, version = v.version, "
    "owner = :owner, updated_at = :now "
    "FROM unnest(CAST(:partitions AS varchar[]), CAST(:expected AS integer[]), CAST(:seqs AS bigint[]), "
    "CAST(:watermarks AS float8[]), CAST(:clocks AS float8[]), CAST(:versions AS integer[])) "
    "AS v(partition, expected, seq, watermark, clock, version) "
    "WHERE t.partition = v.partition AND t.version = v.expected RETURNING t.partition")


def advance_all(session: Session, moves: Sequence[Move], owner: str, now: datetime) -> set[str]:
    """advance() for several partitions in two statements at most (first writes, then the rest); the partitions
    refused (written by another owner since their version was read)."""
    done: set[str] = set()
    first = [(partition, offset) for partition, expected, offset in moves if expected == 0]
    if first:
        # RETURNING, not rowcount: the driver's rowcount for an INSERT that did nothing is not reliably 0.
        rows = [{"partition": partition, "seq": offset.seq, "watermark": offset.watermark, "clock": offset.clock,
                 "version": offset.version, "owner": owner, "updated_at": now} for partition, offset in first]
        statement = insert(_T).values(rows).on_conflict_do_nothing(index_elements=["partition"])
        done.update(session.execute(statement.returning(_T.c.partition)).scalars())
    rest = [(partition, expected, offset) for partition, expected, offset in moves if expected != 0]
    if rest:
        done.update(session.execute(_UPDATE, {
            "partitions": [m[0] for m in rest], "expected": [m[1] for m in rest],
            "seqs": [m[2].seq for m in rest], "watermarks": [m[2].watermark for m in rest],
            "clocks": [m[2].clock for m in rest], "versions": [m[2].version for m in rest],
            "owner": owner, "now": now}).scalars())
    return {partition for partition, _expected, _offset in moves} - done
