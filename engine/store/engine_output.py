"""The engine's output for one batch, written in the caller's transaction: the embedded engine and every fleet
worker store it through this one function."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from sqlalchemy.orm import Session

from gpuslo.engine.events import Event
from gpuslo.engine.slo import store as slo_store
from gpuslo.engine.slo.counter import SliBatch
from gpuslo.engine.store import audit, repository, violations
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.transitions import ENGINE_ACTOR
from gpuslo.engine.violations import Clear, Match

Notify = Callable[[Session, ViolationView, datetime], None]


class Output(Protocol):
    """What an evaluated batch hands the store (runtime.EngineResult)."""

    @property
    def events(self) -> tuple[Event, ...]: ...
    @property
    def matches(self) -> tuple[Match, ...]: ...
    @property
    def clears(self) -> tuple[Clear, ...]: ...
    @property
    def sli(self) -> SliBatch | None: ...
    @property
    def quarantined(self) -> tuple[tuple[Event, str], ...]: ...


def record_result(session: Session, result: Output, now: datetime, notify: Notify,
                  burn_rules: Sequence[str] = (), *, evidence_stored: bool = False,
                  mark_processed: bool = True) -> None:
    """Store one evaluated batch: its matches and clears in evaluation order (violations.record), the SLI
    counts (after the matches: violations they open may be their causes, `burn_rules` being the SLO burn
    alerts), processed_at on its events and the error of each quarantined one. `notify` writes the outbox rows
    of each change that notifies someone; a resolve by a clearing event is audited. `evidence_stored`: see
    violations.record (the embedded engine's events are all stored; a fleet worker's need not be yet).
    `mark_processed`: False when the caller marked the events processed already (a fleet worker, in the short
    transaction that stored them: an UPDATE here would lock rows other workers' batches also touch)."""
    for change in violations.record(session, in_evaluation_order(result), now=now, notifying_only=True,
                                    evidence_stored=evidence_stored):
        if isinstance(change.cause, Clear):
            audit.record(session, at=now, actor=ENGINE_ACTOR, action="resolve", target_type="violation",
                         target_id=change.view.id, after={"status": change.view.status},
                         detail="cleared by an event")
        notify(session, change.view, now)
    slo_store.record_sli(session, result.sli, burn_rules)
    if mark_processed:
        repository.mark_processed(session, [e.id for e in result.events], now)
    if result.quarantined:
        repository.quarantine_events(session, [(e.id, error) for e, error in result.quarantined], now)


def in_evaluation_order(result: Output) -> list[Match | Clear]:
    """The batch's matches and clears in the order the engine evaluated their events, so that a clear followed
    by a new match of its violation resolves it and the match reopens it (in one batch as across two).

    An event's position is its index in `result.events`: a clear's is its event's, a match's that of its latest
    evaluated evidence (the event that completed it). Matches keep their order; a clear goes after every match
    of an event evaluated no later than its own (a match and a clear of one event: the match first). A match
    whose evidence is not in the batch (an absence) keeps its place; a clear whose event is not (a result
    without events) goes after the matches.
    """
    if not result.clears:
        return list(result.matches)
    index = {event.id: position for position, event in enumerate(result.events)}
    ordered: list[Match | Clear] = []
    pending = iter(result.matches)
    waiting: Match | None = next(pending, None)
    for clear in result.clears:
        at = index.get(clear.event.id, len(index))
        while waiting is not None and _position(waiting, index) <= at:
            ordered.append(waiting)
            waiting = next(pending, None)
        ordered.append(clear)
    if waiting is not None:
        ordered.append(waiting)
    ordered.extend(pending)
    return ordered


def _position(match: Match, index: dict[str, int]) -> int:
    return max((index[e.id] for e in match.explanation.evidence if e.id in index), default=-1)
