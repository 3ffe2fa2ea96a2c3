"""The fleet's partition table: per partition of a key space, the last stream sequence whose effects are stored.

Written in the transaction of each batch's violations, evidence, history and outbox rows, so a batch's effects
and its place in the stream commit together (docs/fleet.md).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gpuslo.engine.store.models import Base


class FleetPartitionRow(Base):
    """`seq`: the last stream sequence applied; `watermark`: the newest event time seen then; `clock`: the event
    time up to which absences were checked and stored; `version`: bumped by every write (a stale owner's write
    finds another version and is refused)."""

    __tablename__ = "fleet_partitions"

    partition: Mapped[str] = mapped_column(String(200), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    watermark: Mapped[float] = mapped_column(Float)
    clock: Mapped[float] = mapped_column(Float)
    version: Mapped[int] = mapped_column(Integer)
    owner: Mapped[str] = mapped_column(String(200))
    updated_at: Mapped[datetime]
