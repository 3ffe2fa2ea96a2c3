"""Read-only questions about violations and events: pages, one violation's detail, the charts' series."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpuslo.engine.store import charts, repository
from gpuslo.engine.store.charts import EventSeries, ViolationMark
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import (
    EventFilter,
    Page,
    StoredEvent,
    ViolationDetail,
    ViolationFilter,
    ViolationView,
)


class Queries:
    """Reads of one database, each in its own read-only transaction."""

    def __init__(self, database: Database):
        self._database = database

    def violations(self, filters: ViolationFilter, *, page: int = 1, page_size: int = 50) -> Page[ViolationView]:
        """Violations matching the filter, most recently seen first."""
        with self._database.session(readonly=True) as session:
            return repository.list_violations(session, filters, page=page, page_size=page_size)

    def violation(self, violation_id: int) -> ViolationDetail | None:
        """One violation with its evidence and history; None when there is none with that id."""
        with self._database.session(readonly=True) as session:
            return repository.get_violation(session, violation_id)

    def events(self, filters: EventFilter, *, page: int = 1, page_size: int = 50) -> Page[StoredEvent]:
        """Events matching the filter, newest first."""
        with self._database.session(readonly=True) as session:
            return repository.list_events(session, filters, page=page, page_size=page_size)

    def violation_marks(self, *filters: ViolationFilter) -> list[list[ViolationMark]]:
        """The violations to mark on a chart, one list per filter (read together)."""
        with self._database.session(readonly=True) as session:
            return [charts.violation_marks(session, one) for one in filters]

    def event_series(self, kinds: Sequence[str], *, host: str | None = None, gpu: int | None = None,
                     since: datetime | None = None, until: datetime | None = None) -> EventSeries:
        """The events of `kinds` to chart, oldest first (bounded: `truncated` says when more exist)."""
        with self._database.session(readonly=True) as session:
            return charts.event_series(session, kinds, host=host, gpu=gpu, since=since, until=until)

    def event_places(self, kinds: Sequence[str]) -> list[tuple[str, int | None]]:
        """Every (host, GPU) that sent events of `kinds`: the chart pages' choices."""
        with self._database.session(readonly=True) as session:
            return charts.event_places(session, kinds)
