"""Recount an SLI from the stored events (`gpuslo slo backfill`): when an SLO is added or its indicator changes.

The SLI's buckets and causes are replaced, never added to, in one transaction per SLI that holds the bucket
tables against the engine's writes (SQLite: the single writer; PostgreSQL: a table lock the engine's upserts
wait for). Only events the engine has already processed are read; those it processes after the backfill
commits are counted by the engine, so no event is counted twice or missed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, text

from gpuslo.engine.events import parse_event
from gpuslo.engine.explain import group_key
from gpuslo.engine.slo.build import compile_sli
from gpuslo.engine.slo.counter import BadRequest, SliBatch
from gpuslo.engine.slo.model import BUCKET_S, Sli
from gpuslo.engine.slo.store import record_sli
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import EventRow, SloBucketRow, SloCauseRow, SloDayRow, SloHourRow

_CHUNK = 5000  # events read and recorded at a time, inside the one transaction


def _processed(sli: Sli, since: datetime) -> tuple:  # type: ignore[type-arg]
    return (EventRow.kind == sli.kind, EventRow.processed_at.is_not(None), EventRow.time >= since)


def pending(database: Database, slis: Sequence[Sli], now: datetime) -> int:
    """How many stored events a backfill of `slis` reads (for the progress bar)."""
    with database.session(readonly=True) as session:
        return sum(session.execute(select(func.count()).select_from(EventRow).where(
            *_processed(sli, now - timedelta(seconds=sli.retention_s())))).scalar() or 0 for sli in slis)


def backfill(database: Database, slis: Sequence[Sli], *, now: datetime,
             on_events: Callable[[int], None] | None = None) -> int:
    """Recount each SLI over its window plus the margin as of `now`; returns the request events counted."""
    counted = 0
    for sli in slis:
        compiled = compile_sli(sli)
        burn = [sli.alert_rule_id(a) for a in sli.policy]
        with database.session() as session:
            if database.dialect == "postgresql":
                session.execute(text("LOCK TABLE slo_buckets, slo_hours, slo_days, slo_causes "
                                     "IN SHARE ROW EXCLUSIVE MODE"))
            for table in (SloBucketRow, SloHourRow, SloDayRow, SloCauseRow):
                session.execute(delete(table).where(table.__table__.c.slo_id == sli.slo_id))
            last_time, last_id = now - timedelta(seconds=sli.retention_s()), ""
            while True:
                rows = session.execute(select(EventRow.time, EventRow.id, EventRow.body)
                                       .where(*_processed(sli, last_time),
                                              (EventRow.time > last_time) | (EventRow.id > last_id))
                                       .order_by(EventRow.time, EventRow.id).limit(_CHUNK)).all()
                if not rows:
                    break
                last_time, last_id = rows[-1][0], rows[-1][1]
                deltas: dict[tuple[str, str, int], list[int]] = {}
                bad: list[BadRequest] = []
                for _time, _id, body in rows:
                    event = parse_event(body)
                    if not compiled.is_request(event):
                        continue
                    counted += 1
                    key = group_key({name: event.get(name) for name in sli.group_by})
                    minute = int(event.timestamp // BUCKET_S)
                    delta = deltas.setdefault((sli.slo_id, key, minute), [0, 0])
                    delta[1] += 1
                    if compiled.is_good(event):
                        delta[0] += 1
                    else:
                        bad.append(BadRequest(sli.slo_id, key, minute, event))
                record_sli(session, SliBatch(deltas, tuple(bad)), burn)
                if on_events is not None:
                    on_events(len(rows))
    return counted
