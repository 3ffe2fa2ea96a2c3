"""What the engine thread reads and writes: its backlog of unprocessed events, the quarantine of poison events,
and the output of every evaluated batch. The composition root builds one and hands its methods to the runtime,
so the engine never calls back into the service."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import text

from gpuslo.engine.events import Event
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.engine_output import Notify, record_result

log = logging.getLogger(__name__)
REFILL = 500  # stored events read back per refill of the engine's queue


def _now() -> datetime:
    return datetime.now(UTC)


class EngineStore:
    """The engine's side of the database: `refill`, `quarantine` and `record` are the runtime's callbacks."""

    def __init__(self, database: Database, metrics: Metrics, notify: Notify, burn_rules: Callable[[], list[str]]):
        self._database, self._metrics = database, metrics
        self._notify, self._burn_rules = notify, burn_rules

    def refill(self) -> list[Event]:
        """Stored events to evaluate; one whose body fails today's checks (stored before ingest checked it) is
        quarantined with the reason instead, so it can never stop the engine again."""
        with self._database.session(readonly=True) as session:
            read = repository.unprocessed_events(session, REFILL)
        unreadable = [(r.event, r.error) for r in read if r.error is not None]
        if unreadable:
            log.warning("%d stored events fail today's checks; quarantined: %s", len(unreadable),
                        "; ".join(f"{e.id}: {error}" for e, error in unreadable[:3]))
            self.quarantine(unreadable)
            self._metrics.events_quarantined.labels("read").inc(len(unreadable))
        return [r.event for r in read if r.error is None]

    def quarantine(self, errors: Sequence[tuple[Event, str]]) -> None:
        """Mark poison events with their error (processed, never evaluated again); with none, only check that
        the database answers (the engine asks before it splits a result that cannot be stored)."""
        with self._database.session() as session:
            if not errors:
                session.execute(text("SELECT 1"))
            repository.quarantine_events(session, [(event.id, error) for event, error in errors], _now())

    def record(self, result: EngineResult) -> None:
        """One batch's output in one transaction: matches, clears, SLI counts, processed and quarantined events."""
        now = _now()
        # The output of stored events is evaluated again if a power loss drops it (it carries their
        # processed_at), so its commit need not wait for the disk; wall-clock absences alone are not re-derived.
        # Every event this engine evaluates was stored by ingest first (or read back from the store), so the
        # evidence needs no check that it is stored.
        with self._database.session(rederivable=bool(result.events)) as session:
            record_result(session, result, now, self._notify, self._burn_rules(), evidence_stored=True)
        if result.quarantined:
            self._metrics.events_quarantined.labels("evaluate").inc(len(result.quarantined))
        for rule_id, count in Counter(match.rule_id for match in result.matches).items():
            self._metrics.violations.labels(rule_id).inc(count)
        if result.sli is not None:
            self._metrics.count_sli(result.sli.deltas)
