"""The application core: database, rulebooks and engine wired together; what the web and CLI call."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpuslo.engine.config import Settings
from gpuslo.engine.errors import EngineError, EventError, FieldProblem, Location, RulebookProblem
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.ingest_types import ACCEPTED, REJECTED, IngestReport, IngestResult
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, Runtime
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database

log = logging.getLogger(__name__)
_REFILL = 500


@dataclass(frozen=True)
class RulebookStatus:
    """The rulebooks running now and the problems of the last load (empty when it was clean)."""

    rulebooks: tuple[Rulebook, ...]
    problems: tuple[RulebookProblem, ...]
    loaded_at: datetime


def _now() -> datetime:
    return datetime.now(UTC)


def _reason(problem: FieldProblem) -> str:
    """A low-cardinality label for the rejected-events metric."""
    return problem.reason.split(" (")[0].split(":")[0][:40] if problem.path == "(event)" else problem.path


class Gpuslo:
    """One service instance: ingest → store → engine → violations."""

    def __init__(self, settings: Settings, database: Database, metrics: Metrics):
        self.settings = settings
        self.database = database
        self.metrics = metrics
        self.runtime = Runtime(sink=self._record, queue_size=settings.engine_queue_size, metrics=metrics,
                               refill=self._unprocessed)
        self._status = RulebookStatus((), (), _now())
        self._reload_lock = threading.Lock()

    @classmethod
    def open(cls, settings: Settings) -> Gpuslo:
        """Migrate the database, load the rulebooks and start the engine."""
        database = Database(settings.database_url)
        database.upgrade()
        core = cls(settings, database, Metrics())
        core.reload_rulebooks()
        core.runtime.start()
        return core

    def close(self) -> None:
        self.runtime.stop()
        self.database.dispose()

    # ---- rulebooks ----

    def rulebook_status(self) -> RulebookStatus:
        return self._status

    def reload_rulebooks(self, directory: Path | None = None) -> RulebookStatus:
        """Load the rulebook directory; a broken file keeps its last good version running."""
        directory = directory or self.settings.rules_dir
        with self._reload_lock:
            good, problems = load_directory(directory)
            broken_files = {p.location.file for p in problems}
            loaded = {r.name for r in good}
            kept = tuple(r for r in self._status.rulebooks
                         if r.location.file in broken_files and r.name not in loaded)
            chosen = good + kept
            try:
                self.runtime.load(chosen)
            except EngineError as exc:
                problems += (RulebookProblem(Location(str(directory)), str(exc)),)
                chosen = self._status.rulebooks
            self._status = RulebookStatus(chosen, problems, _now())
            self._record_loads(good, problems)
        for problem in problems:
            log.error("rulebook problem: %s", problem)
        return self._status

    def _record_loads(self, good: Sequence[Rulebook], problems: Sequence[RulebookProblem]) -> None:
        now = _now()
        with self.database.session() as session:
            for rulebook in good:
                repository.record_rulebook_load(
                    session, name=rulebook.name, version=rulebook.version, content_hash=rulebook.content_hash,
                    path=rulebook.location.file or "", source=rulebook.source, error=None, now=now)
            by_file: dict[str, list[str]] = {}
            for problem in problems:
                by_file.setdefault(problem.location.file or "", []).append(str(problem))
            for path, texts in by_file.items():
                repository.record_rulebook_load(
                    session, name=Path(path).stem, version="", content_hash="", path=path, source="",
                    error="\n".join(texts), now=now)

    # ---- ingest ----

    def ingest(self, items: Sequence[object]) -> IngestReport:
        """Validate each item on its own, store the valid ones in one transaction, queue the new ones."""
        results: list[IngestResult | None] = [None] * len(items)
        valid: list[tuple[int, Event]] = []
        for index, item in enumerate(items):
            try:
                valid.append((index, parse_event(item)))
            except EventError as exc:
                item_id = item.get("id") if isinstance(item, dict) else None
                results[index] = IngestResult(index, item_id if isinstance(item_id, str) else None, REJECTED,
                                              exc.problems)
                kind = item.get("kind") if isinstance(item, dict) else None
                self.metrics.events_rejected.labels(str(kind)[:32], _reason(exc.problems[0])).inc()
        if valid:
            with self.database.session() as session:
                statuses = repository.store_events(session, [event for _, event in valid])
            fresh = []
            for (index, event), status in zip(valid, statuses, strict=True):
                results[index] = IngestResult(index, event.id, status)
                if status == ACCEPTED:
                    fresh.append(event)
                    self.metrics.events_accepted.labels(event.kind).inc()
                else:
                    self.metrics.events_rejected.labels(event.kind, status).inc()
            self.runtime.submit(fresh)
        return IngestReport(tuple(r for r in results if r is not None))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        return self.runtime.wait_idle(timeout)

    # ---- engine callbacks (engine thread) ----

    def _unprocessed(self) -> list[Event]:
        with self.database.session(readonly=True) as session:
            return repository.unprocessed_events(session, _REFILL)

    def _record(self, result: EngineResult) -> None:
        now = _now()
        with self.database.session() as session:
            for match in result.matches:
                repository.record_match(session, match, now=now)
            repository.mark_processed(session, [e.id for e in result.events], now)
        for match in result.matches:
            self.metrics.violations.labels(match.rule_id).inc()

