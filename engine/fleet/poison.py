"""Poison messages of a fleet partition: a batch whose output keeps failing is stored one match or clear at a
time, each in a savepoint of the batch's one transaction (with its offset, so a takeover never stores a part
twice); the events of a part that alone fails are quarantined with its error and the partition goes on."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from gpuslo.engine.events import Event
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.engine_output import Notify, in_evaluation_order, record_result
from gpuslo.engine.violations import Match

log = logging.getLogger(__name__)

Quarantined = tuple[Event, str]  # an event set aside, with its error (as EngineResult.quarantined holds them)


def database_answers(database: Database) -> bool:
    """Whether the database answers at all: when it does not, nothing in a failing batch is poison."""
    try:
        with database.session(readonly=True) as session:
            session.execute(text("SELECT 1"))
    except Exception:  # noqa: BLE001  # any failure to answer: the batch is retried whole
        return False
    return True


def store_events(session: Session, events: Sequence[Event], now: datetime) -> list[Quarantined]:
    """Store the events in one savepoint, or, when that fails, each in its own: the events whose row the database
    refuses come back with the error (there is no row to keep it in: it is logged and counted)."""
    try:
        with session.begin_nested():
            repository.store_events(session, events, now=now)
        return []
    except Exception:  # noqa: BLE001  # one of them is refused: find which
        log.exception("storing %d events of a partition batch failed; storing them one at a time", len(events))
    refused = []
    for event in events:
        try:
            with session.begin_nested():
                repository.store_events(session, [event], now=now)
        except Exception as exc:  # noqa: BLE001
            log.error("event %r: the database refuses its row; it is dropped: %s", event.id, exc)
            refused.append((event, f"storing it failed: {type(exc).__name__}: {exc}"[:2000]))
    return refused


def write_in_parts(session: Session, results: Sequence[EngineResult], events: Sequence[Event], now: datetime,
                   notify: Notify) -> list[Quarantined]:
    """Write each match and clear of `results`, in evaluation order, each in its own savepoint; the events a
    failing part was made of (its last evidence of the batch, or its clearing event) come back with the error,
    unwritten."""
    ids = {event.id for event in events}
    poison: dict[str, Quarantined] = {}
    for result in results:
        parts = [EngineResult((), (item,)) if isinstance(item, Match) else EngineResult((), (), (item,))
                 for item in in_evaluation_order(result)]
        for part in parts:
            try:
                with session.begin_nested():
                    record_result(session, part, now, notify)
            except Exception as exc:  # noqa: BLE001  # this part alone fails: its events are the poison
                log.exception("storing one part of a partition batch failed; its event is quarantined")
                cited = [e for m in part.matches for e in m.explanation.evidence if e.id in ids]
                cited += [c.event for c in part.clears if c.event.id in ids]
                for event in cited[-1:]:  # the event that made the part: the last evidence, or the clearing one
                    poison.setdefault(event.id, (event, f"storing what it produced failed: "
                                                        f"{type(exc).__name__}: {exc}"[:2000]))
    return list(poison.values())


def quarantine(session: Session, quarantined: Sequence[Quarantined], now: datetime) -> None:
    """Store each event's error (it counts as processed, and is never evaluated again by an embedded engine)."""
    repository.quarantine_events(session, [(event.id, error) for event, error in quarantined], now)


def evaluation_quarantined(results: Sequence[EngineResult]) -> list[Quarantined]:
    """The events whose evaluation raised, once each, in stream order."""
    return once([item for result in results for item in result.quarantined])


def once(quarantined: Sequence[Quarantined]) -> list[Quarantined]:
    """Each event once, with its first error."""
    seen: dict[str, Quarantined] = {}
    for event, error in quarantined:
        seen.setdefault(event.id, (event, error))
    return list(seen.values())
