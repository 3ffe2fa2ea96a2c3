"""The engine's output for one batch, written in the caller's transaction: the embedded engine and every fleet
worker store it through this one function."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from sqlalchemy.orm import Session

from gpuslo.engine.store import audit, batch, lifecycle, repository
from gpuslo.engine.store.read_models import ViolationView
from gpuslo.engine.store.rows import ENGINE_ACTOR
from gpuslo.engine.violations import Clear, Match

Notify = Callable[[Session, ViolationView, datetime], None]


class Output(Protocol):
    """What an evaluated batch hands the store (runtime.EngineResult)."""

    @property
    def events(self) -> tuple[object, ...]: ...
    @property
    def matches(self) -> tuple[Match, ...]: ...
    @property
    def clears(self) -> tuple[Clear, ...]: ...


def write_output(session: Session, result: Output, now: datetime, notify: Notify) -> None:
    """One statement set for the batch's matches, then its clears, then processed_at on its events; `notify`
    writes the outbox rows of each change that notifies someone."""
    for view in batch.record_matches(session, result.matches, now=now, notifying_only=True):
        notify(session, view, now)
    for view in lifecycle.resolve_cleared(session, result.clears, now):  # after the batch's matches
        audit.record(session, at=now, actor=ENGINE_ACTOR, action="resolve", target_type="violation",
                     target_id=view.id, after={"status": view.status}, detail="cleared by an event")
        notify(session, view, now)
    repository.mark_processed(session, [e.id for e in result.events], now)  # type: ignore[attr-defined]
