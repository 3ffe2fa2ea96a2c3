"""Ingest of one request's decoded items: validate each on its own, store the valid ones, queue the new ones.

Each item is accepted or refused on its own: a batch whose single transaction fails is stored again event by
event, so one event the database refuses is reported with its index and the others go in. Every item is
counted exactly once in the metrics: accepted, duplicate, or rejected with a reason from a fixed set.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from sqlalchemy import text

from gpuslo.engine.errors import EventError, FieldProblem
from gpuslo.engine.event_body import parse_event_body
from gpuslo.engine.event_checks import REASONS, bounds_problem
from gpuslo.engine.events import KINDS, Event, parse_event
from gpuslo.engine.ingest_types import ACCEPTED, DUPLICATE, REJECTED, IngestReport, IngestResult
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.event_read import describe

log = logging.getLogger(__name__)
_KNOWN_KINDS = frozenset(KINDS)


def kind_label(item: object) -> str:
    """The `kind` label of an item's metrics: a known kind or "unknown", never the raw value."""
    kind = item.get("kind") if isinstance(item, dict) else None
    return kind if isinstance(kind, str) and kind in _KNOWN_KINDS else "unknown"


def reason_label(problem: FieldProblem) -> str:
    return problem.code if problem.code in REASONS else "invalid"


def _echo_id(item: object) -> str | None:
    """The item's id to echo in the answer: only a plain string that can be written as JSON."""
    item_id = item.get("id") if isinstance(item, dict) else None
    if not isinstance(item_id, str) or len(item_id) > 128 or "\x00" in item_id:
        return None
    try:
        item_id.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return item_id


class Ingest:
    """The ingest service of one core; `submit` hands new events to the engine."""

    def __init__(self, database: Database, metrics: Metrics, submit: Callable[[Sequence[Event]], object],
                 clock_skew_s: float, clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self._database, self._metrics, self._submit = database, metrics, submit
        self._skew_s, self._clock = clock_skew_s, clock
        # Fleet mode: new events go to the bus (JetStream's ack says accepted or duplicate) instead of the
        # database and the local engine (docs/fleet.md).
        self.publish: Callable[[Sequence[Event]], list[str]] | None = None
        # The engine in a process of its own (engine/engine_process.py) takes the new events' stored bodies,
        # already built for the insert, instead of the events.
        self.submit_bodies: Callable[[Sequence[str]], object] | None = None

    def rejected(self, kind: str, problem: FieldProblem, count: int = 1) -> None:
        """Count refused items (also called by the web layer for NDJSON lines that are not JSON)."""
        self._metrics.events_rejected.labels(kind, reason_label(problem)).inc(count)

    def __call__(self, items: Sequence[object]) -> IngestReport:
        results: list[IngestResult | None] = [None] * len(items)
        valid: list[tuple[int, Event]] = []
        # The stored bodies are built with the events, before the transaction takes SQLite's write lock; an
        # event sent in canonical form is serialized as it came (engine/event_body.py). The bus takes events.
        bodies: list[str] | None = [] if self.publish is None else None
        now = self._clock()
        for index, item in enumerate(items):
            try:
                if bodies is None:
                    event = parse_event(item)
                else:
                    event, body = parse_event_body(item)
                late = bounds_problem(event.time, now, self._skew_s)
                if late is not None:
                    raise EventError([late])
                valid.append((index, event))
                if bodies is not None:
                    bodies.append(body)
            except EventError as exc:
                results[index] = IngestResult(index, _echo_id(item), REJECTED, exc.problems)
                self.rejected(kind_label(item), exc.problems[0])
        if valid:
            self._store(valid, results, bodies)
        return IngestReport(tuple(r for r in results if r is not None))

    def _store(self, valid: list[tuple[int, Event]], results: list[IngestResult | None],
               bodies: list[str] | None) -> None:
        events = [event for _, event in valid]
        if self.publish is not None:  # a bus that does not ack fails the request (503): nothing was refused
            statuses: list[str | FieldProblem] = list(self.publish(events))
        else:
            if bodies is None:  # publish was unset while this request was parsed
                bodies = repository.event_bodies(events)
            statuses = self._store_batch(events, bodies)
        self._count(valid, statuses, results, bodies)

    def _store_batch(self, events: list[Event], bodies: list[str]) -> list[str | FieldProblem]:
        try:
            with self._database.session() as session:
                return list(repository.store_events(session, events, bodies=bodies))
        except Exception as exc:  # noqa: BLE001  # whatever the driver raises, the events are retried alone
            log.warning("storing a batch of %d events failed (%s); storing them one by one", len(events), exc)
            return self._store_each(events, exc)

    def _count(self, valid: list[tuple[int, Event]], statuses: Sequence[str | FieldProblem],
               results: list[IngestResult | None], bodies: Sequence[str] | None = None) -> None:
        fresh, fresh_bodies = [], []
        counted: Counter[tuple[str, str]] = Counter()  # one metric update per kind and status, not per event
        for position, ((index, event), status) in enumerate(zip(valid, statuses, strict=True)):
            if isinstance(status, FieldProblem):
                results[index] = IngestResult(index, event.id, REJECTED, (status,))
                self.rejected(event.kind, status)
                continue
            results[index] = IngestResult(index, event.id, status)
            counted[event.kind, status] += 1
            if status == ACCEPTED:
                fresh.append(event)
                if bodies is not None:
                    fresh_bodies.append(bodies[position])
        for (kind, status), count in counted.items():
            if status == ACCEPTED:
                self._metrics.events_accepted.labels(kind).inc(count)
            elif status == DUPLICATE:
                self._metrics.events_duplicate.labels(kind).inc(count)
            else:
                self._metrics.events_rejected.labels(kind, "conflict").inc(count)
        self._metrics.signals.observe(fresh)  # token-latency and fragmentation series for /metrics
        if self.publish is not None:
            return
        if self.submit_bodies is not None and fresh:
            self.submit_bodies(fresh_bodies if bodies is not None else repository.event_bodies(fresh))
        else:
            self._submit(fresh)

    def _store_each(self, events: Sequence[Event], batch_error: Exception) -> list[str | FieldProblem]:
        """Each event in its own transaction; one the database refuses becomes a problem. When the database
        itself is unreachable, the batch's error goes up (503) instead: nothing was refused for its content."""
        statuses: list[str | FieldProblem] = []
        for event in events:
            try:
                with self._database.session() as session:
                    statuses += repository.store_events(session, [event])
            except Exception as exc:  # noqa: BLE001  # this event alone: the database refused it
                statuses.append(FieldProblem("(event)", f"the database refused this event: {describe(exc)}",
                                             "store_failed"))
        if all(isinstance(s, FieldProblem) for s in statuses) and not self._database_answers():
            raise batch_error
        return statuses

    def _database_answers(self) -> bool:
        try:
            with self._database.session(readonly=True) as session:
                session.execute(text("SELECT 1"))
        except Exception:  # noqa: BLE001  # any failure means unreachable
            return False
        return True

