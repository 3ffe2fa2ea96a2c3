"""The application core: database, rulebooks and engine wired together; what the web and CLI call."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import text
from sqlalchemy.orm import Session

from gpuslo.engine import housekeeping
from gpuslo.engine.alerts import AlertsConfig, DeliveryPolicy, DeliveryWorker, enqueue_for_change, load_alerts_config
from gpuslo.engine.alerts.alertmanager import AlertmanagerReceiver, AlertmanagerResender
from gpuslo.engine.alerts.delivery_metrics import DeliveryMetrics
from gpuslo.engine.config import Settings
from gpuslo.engine.engine_health import EngineHealth
from gpuslo.engine.engine_thread import Runtime
from gpuslo.engine.errors import (
    EngineError,
    FieldProblem,
    GpusloError,
    Location,
    NotFoundError,
    RulebookNotLoaded,
    RulebookProblem,
)
from gpuslo.engine.events import Event
from gpuslo.engine.ingest import Ingest
from gpuslo.engine.ingest_types import IngestReport
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.metrics_state import StateCollector, StateSnapshot
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import SEVERITIES, Rulebook
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.slo import report as slo_report
from gpuslo.engine.slo import store as slo_store
from gpuslo.engine.slo.metrics import SloCollector
from gpuslo.engine.slo.model import Sli
from gpuslo.engine.stall_causes import CLUSTER_INTERVAL_S, StallCauses
from gpuslo.engine.store import (
    audit,
    charts,
    lifecycle,
    notifications,
    receivers,
    repository,
    silences,
)
from gpuslo.engine.store.audit import AuditNote
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.durability import check_durability
from gpuslo.engine.store.engine_output import record_result
from gpuslo.engine.store.outbox import NotificationView
from gpuslo.engine.store.read_models import SilenceView, ViolationView
from gpuslo.engine.store.receivers import ReceiverHealth

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


def delivery_policy(settings: Settings) -> DeliveryPolicy:
    """The delivery worker's policy from the settings (the rest are DeliveryPolicy's defaults)."""
    return DeliveryPolicy(per_receiver=settings.delivery_per_receiver,
                          max_age_s=settings.notification_max_age_hours * 3600,
                          dead_letter=settings.dead_letter_receiver or None)


class Gpuslo:
    """One service instance: ingest → store → engine → violations."""

    def __init__(self, settings: Settings, database: Database, metrics: Metrics):
        self.settings = settings
        self.database = database
        self.metrics = metrics
        self.runtime = Runtime(sink=self._record, queue_size=settings.engine_queue_size, metrics=metrics,
                               refill=self._unprocessed, max_ahead_s=settings.max_clock_skew_seconds,
                               quarantine=self._quarantine)
        self._ingest = Ingest(database, metrics, self.runtime.submit, settings.max_clock_skew_seconds)
        self._status = RulebookStatus((), (), _now())
        self._reload_lock = threading.Lock()
        # Read at every scrape; registered after _status exists (the registry collects once on registration).
        metrics.registry.register(StateCollector(self._state_snapshot, SEVERITIES, charts.ACTIVE_STATUSES))
        # Periodic jobs (auto-resolve, silence expiry; others add theirs); started by open().
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.scheduler.add_job(self.run_lifecycle, "interval", seconds=LIFECYCLE_INTERVAL_S, id="lifecycle",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self.run_retention, "interval", seconds=RETENTION_INTERVAL_S, id="retention",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self.run_slo_retention, "interval", seconds=RETENTION_INTERVAL_S,
                               id="slo-retention", max_instances=1, coalesce=True)
        metrics.registry.register(SloCollector(self.slo_groups))
        self.stall_causes = StallCauses(database)  # clustered stall causes, for the "Stall causes" page
        self.scheduler.add_job(self.stall_causes.run, "interval", seconds=CLUSTER_INTERVAL_S, id="stall-causes",
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
        self.delivery = DeliveryWorker(database, self.alerts, delivery_policy(settings),
                                       metrics=DeliveryMetrics(self.alerts.receivers, metrics.registry)) \
            if self.alerts else None
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
        check_durability(database, allow_unsafe=settings.allow_unsafe_durability)
        core = cls(settings, database, Metrics())
        core.reload_rulebooks()
        core.publish = publish
        core._ingest.publish = publish
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
            chosen, refused = self._load_engine(good + kept)
            problems += refused
            good = tuple(r for r in good if r in chosen)
            self._status = RulebookStatus(chosen, problems, _now())
            self._record_loads(good, problems, note, before)
        for problem in problems:
            log.error("rulebook problem: %s", problem)
        return self._status

    def _load_engine(self, wanted: tuple[Rulebook, ...]) -> tuple[tuple[Rulebook, ...], tuple[RulebookProblem, ...]]:
        """Load `wanted` into the engine; a rulebook the engine refuses is replaced by its running version (or
        left out) and the rest loaded again. Returns what runs and one problem per refused rulebook."""
        chosen, problems = wanted, []
        running = {r.name: r for r in self._status.rulebooks}
        for _attempt in range(2 * len(wanted) + 1):
            try:
                self.runtime.load(chosen, self._stored_buckets)
                return chosen, tuple(problems)
            except RulebookNotLoaded as exc:
                problems.append(RulebookProblem(Location(exc.file), f"rulebook '{exc.name}' not loaded by the "
                                                                    f"engine: {exc.reason}"))
                fallback = running.pop(exc.name, None)  # popped: a running version that fails too is dropped
                chosen = tuple(r for r in chosen if r.name != exc.name) + ((fallback,) if fallback else ())
            except EngineError as exc:
                problems.append(RulebookProblem(Location(str(self.settings.rules_dir)), str(exc)))
                break
        return self._status.rulebooks, tuple(problems)

    def reload_if_changed(self) -> RulebookStatus | None:
        """Reload when a rulebook file was added, removed or changed since the last load; None when not.

        The watcher job never raises: a failure is logged and the next change is picked up as usual.
        """
        try:
            fingerprint = rules_fingerprint(self.settings.rules_dir, self.settings.rules_overrides_dir)
            if fingerprint == self._rules_fingerprint:
                return None
            log.info("rulebook files changed in %s: reloading", self.settings.rules_dir)
            return self.reload_rulebooks()
        except Exception:  # noqa: BLE001 - the watcher must outlive any failure of one reload
            log.exception("reloading the rulebooks of %s failed; the running rulebooks are kept",
                          self.settings.rules_dir)
            return None

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
        """Validate each item on its own, store the valid ones (each on its own if the batch fails), queue the
        new ones (engine/ingest.py)."""
        return self._ingest(items)

    def ingest_refused(self, status: int) -> None:
        """Count a request refused whole (bad JSON, 413, 415, 429, ...): its events were never looked at."""
        self.metrics.ingest_requests_refused.labels(str(status)).inc()

    def ingest_rejected(self, problem: FieldProblem) -> None:
        """Count an item refused before it reached `ingest` (an NDJSON line that is not JSON)."""
        self._ingest.rejected("unknown", problem)

    def engine_health(self) -> EngineHealth:
        if self.publish is not None:  # fleet mode: the workers evaluate; this replica only publishes
            return EngineHealth(True)
        return self.runtime.health()

    def _state_snapshot(self) -> StateSnapshot:
        """What /metrics reads at scrape time (metrics_state)."""
        with self.database.session(readonly=True) as session:
            counts = charts.count_open_violations(session)
        status = self._status
        return StateSnapshot(counts, self.runtime.running, len(status.rulebooks), len(status.problems))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        return self.runtime.wait_idle(timeout)

    # ---- engine callbacks (engine thread) ----

    def _unprocessed(self) -> list[Event]:
        """Stored events to evaluate; one whose body fails today's checks (stored before ingest checked it) is
        quarantined with the reason instead, so it can never stop the engine again."""
        with self.database.session(readonly=True) as session:
            read = repository.unprocessed_events(session, _REFILL)
        unreadable = [(r.event, r.error) for r in read if r.error is not None]
        if unreadable:
            log.warning("%d stored events fail today's checks; quarantined: %s", len(unreadable),
                        "; ".join(f"{e.id}: {error}" for e, error in unreadable[:3]))
            self._quarantine(unreadable)
            self.metrics.events_quarantined.labels("read").inc(len(unreadable))
        return [r.event for r in read if r.error is None]

    def _quarantine(self, errors: Sequence[tuple[Event, str]]) -> None:
        """Mark poison events with their error (processed, never evaluated again); with none, only check that
        the database answers (the engine asks before it splits a result that cannot be stored)."""
        with self.database.session() as session:
            if not errors:
                session.execute(text("SELECT 1"))
            repository.quarantine_events(session, [(event.id, error) for event, error in errors], _now())

    def _record(self, result: EngineResult) -> None:
        now = _now()
        # The output of stored events is evaluated again if a power loss drops it (it carries their
        # processed_at), so its commit need not wait for the disk; wall-clock absences alone are not re-derived.
        with self.database.session(rederivable=bool(result.events)) as session:
            record_result(session, result, now, self._notify, self._burn_rules())
        if result.quarantined:
            self.metrics.events_quarantined.labels("evaluate").inc(len(result.quarantined))
        for match in result.matches:
            self.metrics.violations.labels(match.rule_id).inc()
        if result.sli is not None:
            self.metrics.count_sli(result.sli.deltas)

    # ---- measured SLOs (engine/slo) ----

    def slis(self) -> tuple[Sli, ...]:
        """The SLIs the engine counts now."""
        return self.runtime.evaluator.slo.slis

    def _burn_rules(self) -> list[str]:
        return [sli.alert_rule_id(alert) for sli in self.slis() for alert in sli.policy]

    def _stored_buckets(self, sli: Sli) -> list[tuple[str, int, int, int]]:
        with self.database.session(readonly=True) as session:
            return list(slo_store.stored_buckets(session, sli))

    def slo_groups(self) -> list[slo_report.SloGroup]:
        with self.database.session(readonly=True) as session:
            return slo_report.slo_groups(session, self.slis())

    def slo_group(self, group_id: str) -> slo_report.SloGroup | None:
        with self.database.session(readonly=True) as session:
            return slo_report.slo_group(session, self.slis(), group_id)

    def slo_causes(self, group: slo_report.SloGroup, limit: int = 50) -> tuple[slo_report.Cause, ...]:
        with self.database.session(readonly=True) as session:
            return slo_report.causes_of(session, group, limit)

    def slo_history(self, group: slo_report.SloGroup) -> list[tuple[int, float]]:
        with self.database.session(readonly=True) as session:
            return slo_report.hourly_burn(session, group)

    def violation_costs(self, violation_id: int) -> list[slo_report.ViolationCost]:
        with self.database.session(readonly=True) as session:
            return slo_report.violation_costs(session, self.slis(), violation_id)

    def run_slo_retention(self, now: datetime | None = None) -> int:
        """The periodic job: drop SLI buckets older than each SLO's window plus a day."""
        try:
            with self.database.session() as session:
                return slo_store.prune(session, self.slis(), now or _now())
        except GpusloError:
            log.exception("SLO retention failed; it runs again in %.0f s", RETENTION_INTERVAL_S)
            return 0

    # ---- violation lifecycle (human actions and the periodic job) ----

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

    def receiver_health(self) -> list[ReceiverHealth]:
        """Every receiver's health (last success and failure, disabled, queue); empty without alerting."""
        if self.delivery is None:
            return []
        return self.delivery.health()

    def enable_receiver(self, name: str, *, actor: str, source: str | None = None) -> ReceiverHealth:
        """Re-enable a receiver disabled by a 410 Gone; its waiting notifications go out again. Audited;
        NotFoundError for an unknown receiver, InvalidTransition (409) when it is not disabled."""
        if self.alerts is None or name not in self.alerts.receivers:
            raise NotFoundError(f"no receiver named {name!r} in the alerts config")
        with self.database.session() as session:
            before, after = receivers.enable(session, name)
            audit.record(session, at=_now(), actor=actor, action="receiver.enable", target_type="receiver",
                         target_id=name, before=before.to_dict(), after=after.to_dict(), source_ip=source)
        log.info("receiver %s re-enabled by %s", name, actor)
        return after

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
        """The periodic job: prune raw events older than `event_retention_days` (evidence is kept), ended login
        sessions, and the audit log when `audit_retention_days` is set; the number of events pruned."""
        return housekeeping.run_retention(self.database, self.settings, now or _now(), RETENTION_INTERVAL_S)


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
