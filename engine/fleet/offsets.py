"""Where each partition stands: read the stored offset, and advance it in the batch's own transaction only if no
other owner wrote it since (compare-and-set on `version`), so a stale owner can never store a batch twice."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
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
    values = {"seq": offset.seq, "watermark": offset.watermark, "clock": offset.clock, "version": offset.version,
              "owner": owner, "updated_at": now}
    if expected == 0:
        statement: Any = (insert(_T).values(partition=partition, **values)
                          .on_conflict_do_nothing(index_elements=["partition"]))
    else:
        statement = update(_T).where(_T.c.partition == partition, _T.c.version == expected).values(**values)
    # RETURNING, not rowcount: the driver's rowcount for an INSERT that did nothing is not reliably 0.
    return session.execute(statement.returning(_T.c.partition)).first() is not None
