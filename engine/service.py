"""The application core: database, rulebooks and engine wired together; what the web and CLI call."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy.orm import Session

from gpuslo.engine.alerts import AlertsConfig, DeliveryWorker, enqueue_for_change, load_alerts_config
from gpuslo.engine.alerts.alertmanager import AlertmanagerReceiver, AlertmanagerResender
from gpuslo.engine.config import Settings
from gpuslo.engine.errors import EngineError, EventError, FieldProblem, GpusloError, Location, RulebookProblem
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.ingest_types import ACCEPTED, REJECTED, IngestReport, IngestResult
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, Runtime
from gpuslo.engine.store import audit, lifecycle, notifications, repository, retention, silences
from gpuslo.engine.store.audit import AuditNote
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.engine_output import write_output
from gpuslo.engine.store.outbox import NotificationView
from gpuslo.engine.store.views import SilenceView, ViolationView

log = logging.getLogger(__name__)
_REFILL = 500
# How often auto-resolve and silence expiry run; a quiet period is honoured to within this much.
LIFECYCLE_INTERVAL_S = 15.0
RETENTION_INTERVAL_S = 3600.0
T = TypeVar("T")


@dataclass(frozen=True)
class RulebookStatus:
    """The rulebooks running now and the problems of the last load (empty when it was clean)."""

    rulebooks: tuple[Rulebook, ...]
    problems: tuple[RulebookProblem, ...]
    loaded_at: datetime


def rules_fingerprint(directory: Path, overrides_dir: Path | None = None) -> tuple[tuple[str, int, int], ...]:
    """Name, size and modification time of every rulebook and site override file: what the watcher compares."""
    found: list[tuple[str, int, int]] = []
    for folder in (directory, overrides_dir):
        try:
            files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml")) if folder else []
            found += [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
        except OSError:
            continue
    return tuple(found)


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
        # Periodic jobs (auto-resolve, silence expiry; others add theirs); started by open().
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.scheduler.add_job(self.run_lifecycle, "interval", seconds=LIFECYCLE_INTERVAL_S, id="lifecycle",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self.run_retention, "interval", seconds=RETENTION_INTERVAL_S, id="retention",
                               max_instances=1, coalesce=True)
        if settings.rules_poll_seconds > 0:  # hot reload when a rulebook file changes
            self.scheduler.add_job(self.reload_if_changed, "interval", seconds=settings.rules_poll_seconds,
                                   id="rules-watch", max_instances=1, coalesce=True)
        self._rules_fingerprint: tuple[tuple[str, int, int], ...] | None = None
        # Fleet mode (`serve --bus`): valid events go to the bus and the workers store and evaluate them.
        self.publish: Callable[[Sequence[Event]], list[str]] | None = None
        # Alerting (optional): routing config, and the outbox delivery job on the same scheduler.
        self.alerts: AlertsConfig | None = (load_alerts_config(settings.alerts_config)
                                            if settings.alerts_config else None)
        self.delivery = DeliveryWorker(database, self.alerts) if self.alerts else None
        if self.delivery:
            self.delivery.install(self.scheduler)
        self.resender = (AlertmanagerResender(
            database, [r for r in self.alerts.receivers.values() if isinstance(r, AlertmanagerReceiver)],
            self.alerts.target_policy, settings.public_url) if self.alerts else None)
        if self.resender:
            self.resender.install(self.scheduler)

    @classmethod
    def open(cls, settings: Settings, *, publish: Callable[[Sequence[Event]], list[str]] | None = None,
             leader: Callable[[], bool] | None = None) -> Gpuslo:
        """Migrate the database, load the rulebooks and start the engine.

        Fleet mode: `publish` takes the engine's place (no engine thread here), and the periodic jobs run only
        while `leader()` says this process leads the fleet.
        """
        database = Database(settings.database_url)
        database.upgrade()
        core = cls(settings, database, Metrics())
        core.reload_rulebooks()
        core.publish = publish
        if publish is None:
            core.runtime.start()
        if leader is not None:
            for job in core.scheduler.get_jobs():
                job.modify(func=_led(leader, job.func))
        core.scheduler.start()
        return core

    def close(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        if self.delivery:
            self.delivery.close()
        if self.resender:
            self.resender.close()
        self.runtime.stop()
        self.database.dispose()

    # ---- rulebooks ----

    def rulebook_status(self) -> RulebookStatus:
        return self._status

    def reload_rulebooks(self, directory: Path | None = None, *, actor: str | None = None,
                         source: str | None = None) -> RulebookStatus:
        """Load the rulebook directory; a broken file keeps its last good version running.

        With an `actor` (a human or API reload) the audit row joins the transaction recording the load.
        """
        directory = directory or self.settings.rules_dir
        note = AuditNote("rulebook.reload", "rulebooks", str(directory), actor, source) if actor else None
        with self._reload_lock:
            overrides_dir = self.settings.rules_overrides_dir
            if directory == self.settings.rules_dir:
                self._rules_fingerprint = rules_fingerprint(directory, overrides_dir)
            before = _loaded(self._status.rulebooks)
            good, problems = load_directory(directory, overrides_dir)
            # A broken site override also reports a problem at its rulebook's file, so that one is kept too.
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
            self._record_loads(good, problems, note, before)
        for problem in problems:
            log.error("rulebook problem: %s", problem)
        return self._status

    def reload_if_changed(self) -> RulebookStatus | None:
        """Reload when a rulebook file was added, removed or changed since the last load; None when not."""
        fingerprint = rules_fingerprint(self.settings.rules_dir, self.settings.rules_overrides_dir)
        if fingerprint == self._rules_fingerprint:
            return None
        log.info("rulebook files changed in %s: reloading", self.settings.rules_dir)
        return self.reload_rulebooks()

    def _record_loads(self, good: Sequence[Rulebook], problems: Sequence[RulebookProblem],
                      note: AuditNote | None = None, before: dict[str, object] | None = None) -> None:
        now = _now()
        with self.database.session() as session:
            if note is not None:
                audit.record(session, at=now, actor=note.actor, action=note.action, target_type=note.target_type,
                             target_id=note.target_id, before=before, after=_loaded(self._status.rulebooks),
                             source_ip=note.source, detail=f"{len(problems)} problem(s)" if problems else None)
            for rulebook in good:
                repository.record_rulebook_load(
                    session, name=rulebook.name, version=rulebook.version, content_hash=rulebook.content_hash,
                    path=rulebook.location.file or "", source=_stored_source(rulebook), error=None, now=now)
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
            if self.publish is not None:
                statuses = self.publish([event for _, event in valid])
            else:
                with self.database.session() as session:
                    statuses = repository.store_events(session, [event for _, event in valid])
            fresh = []
            counted: Counter[tuple[str, str]] = Counter()  # one metric update per kind and status, not per event
            for (index, event), status in zip(valid, statuses, strict=True):
                results[index] = IngestResult(index, event.id, status)
                counted[event.kind, status] += 1
                if status == ACCEPTED:
                    fresh.append(event)
            for (kind, status), count in counted.items():
                if status == ACCEPTED:
                    self.metrics.events_accepted.labels(kind).inc(count)
                else:
                    self.metrics.events_rejected.labels(kind, status).inc(count)
            if self.publish is None:
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
        # The output of stored events is evaluated again if a power loss drops it (it carries their
        # processed_at), so its commit need not wait for the disk; wall-clock absences alone are not re-derived.
        with self.database.session(rederivable=bool(result.events)) as session:
            write_output(session, result, now, self._notify)  # one statement set per batch
        for match in result.matches:
            self.metrics.violations.labels(match.rule_id).inc()

    # ---- incident lifecycle (human actions and the periodic job) ----

    def _in_transaction(self, change: Callable[[Session], T], note: AuditNote | None = None) -> T:
        """Run one lifecycle change in its own transaction; the outbox rows and the audit row join it."""
        with self.database.session() as session:
            result = audit.audited(session, note, change, _now()) if note else change(session)
            if isinstance(result, ViolationView):
                self._notify(session, result, _now())
            return result

    def _notify(self, session: Session, view: ViolationView, now: datetime) -> None:
        """Outbox rows for what the change means to receivers (view.notify), in the change's transaction."""
        if self.alerts is not None:
            enqueue_for_change(session, view, config=self.alerts, public_url=self.settings.public_url, now=now)

    def acknowledge(self, violation_id: int, *, actor: str, comment: str | None = None,
                    source: str | None = None) -> ViolationView:
        return self._in_transaction(lambda s: lifecycle.acknowledge(
            s, violation_id, actor=actor, comment=comment, now=_now(), source=source),
            AuditNote("acknowledge", "violation", violation_id, actor, source, comment))

    def resolve(self, violation_id: int, *, actor: str, comment: str | None = None,
                source: str | None = None) -> ViolationView:
        return self._in_transaction(lambda s: lifecycle.resolve(
            s, violation_id, actor=actor, comment=comment, now=_now(), source=source),
            AuditNote("resolve", "violation", violation_id, actor, source, comment))

    def reopen(self, violation_id: int, *, actor: str, comment: str | None = None,
               source: str | None = None) -> ViolationView:
        return self._in_transaction(lambda s: lifecycle.reopen(
            s, violation_id, actor=actor, comment=comment, now=_now(), source=source),
            AuditNote("reopen", "violation", violation_id, actor, source, comment))

    def comment(self, violation_id: int, *, actor: str, comment: str, source: str | None = None) -> ViolationView:
        return self._in_transaction(lambda s: lifecycle.comment(
            s, violation_id, actor=actor, comment=comment, now=_now(), source=source),
            AuditNote("comment", "violation", violation_id, actor, source, comment))

    def create_silence(self, *, matchers: Mapping[str, object], starts_at: datetime, ends_at: datetime,
                       author: str, comment: str, source: str | None = None) -> SilenceView:
        return self._in_transaction(lambda s: silences.create_silence(
            s, matchers=matchers, starts_at=starts_at, ends_at=ends_at, author=author, comment=comment,
            now=_now()), AuditNote("silence.create", "silence", None, author, source, comment))

    def expire_silence(self, silence_id: int, *, actor: str, source: str | None = None) -> SilenceView:
        return self._in_transaction(lambda s: silences.expire_silence(s, silence_id, actor=actor, now=_now()),
                                    AuditNote("silence.expire", "silence", silence_id, actor, source))

    def retry_notification(self, notification_id: int, *, actor: str,
                           source: str | None = None) -> NotificationView:
        """Send a dead notification again (fresh attempt count, due now), noted in the violation's history and the
        audit log; 409 InvalidTransition when not dead."""
        return self._in_transaction(lambda s: notifications.retry(s, notification_id, _now(), actor=actor,
                                                                  source=source),
                                    AuditNote("notification.retry", "notification", notification_id, actor, source))

    def quiet_by_rule(self) -> dict[str, float]:
        """`resolve.after` of every loaded rule that has one."""
        return {rule.id: rule.lifecycle.resolve_after_s for rulebook in self._status.rulebooks
                for rule in rulebook.rules if rule.lifecycle.resolve_after_s is not None}

    def run_lifecycle(self, now: datetime | None = None) -> list[ViolationView]:
        """The periodic job: auto-resolve quiet violations and expire ended silences; returns those resolved."""
        now = now or _now()
        try:
            with self.database.session() as session:
                resolved = lifecycle.auto_resolve_due(session, now, self.quiet_by_rule())
                for view in resolved:
                    self._notify(session, view, now)
                silences.expire_ended_silences(session, now)
        except GpusloError:
            log.exception("lifecycle job failed; it runs again in %.0f s", LIFECYCLE_INTERVAL_S)
            return []
        for view in resolved:
            log.info("violation %s (%s %s) auto-resolved after a quiet period", view.id, view.rule_id,
                     view.group_key)
        return resolved

    def run_retention(self, now: datetime | None = None) -> int:
        """The periodic job: prune raw events older than `event_retention_days` (evidence is kept)."""
        days = self.settings.event_retention_days
        if days <= 0:
            return 0
        cutoff = (now or _now()) - timedelta(days=days)
        pruned = 0
        try:
            while True:
                with self.database.session() as session:
                    deleted = retention.prune_events_batch(session, cutoff)
                pruned += deleted
                if deleted < retention.BATCH:
                    break
        except GpusloError:
            log.exception("retention job failed after pruning %d events; it runs again in %.0f s", pruned,
                          RETENTION_INTERVAL_S)
        if pruned:
            log.info("retention: pruned %d events received before %s", pruned, cutoff.isoformat())
        return pruned


def _stored_source(rulebook: Rulebook) -> str:
    """The text a stored rulebook version keeps: the shipped file, then the site override in force (its hash
    covers both)."""
    if rulebook.override_file is None:
        return rulebook.source
    return f"{rulebook.source}\n# ---- site override: {rulebook.override_file} ----\n{rulebook.override_source}"


def _loaded(rulebooks: Sequence[Rulebook]) -> dict[str, object]:
    """The running rulebooks as an audit snapshot: name → version and content hash."""
    return {rb.name: f"{rb.version} {rb.content_hash[:12]}" for rb in rulebooks}


def _led(leader: Callable[[], bool], job: Callable[..., object]) -> Callable[..., object]:
    """A periodic job that runs only in the fleet's leader."""
    def run(*args: object, **kwargs: object) -> object:
        return job(*args, **kwargs) if leader() else None
    return run
