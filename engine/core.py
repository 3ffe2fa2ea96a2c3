"""The composition root: one gpuslo instance's database, engine, scheduler, alerting and metrics wired together,
and the services (gpuslo.engine.services) that the web and the CLI call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import text

from gpuslo.engine import housekeeping
from gpuslo.engine.alerts import AlertsConfig, DeliveryPolicy, DeliveryWorker, load_alerts_config
from gpuslo.engine.alerts.alertmanager import AlertmanagerReceiver, AlertmanagerResender
from gpuslo.engine.alerts.delivery_metrics import DeliveryMetrics
from gpuslo.engine.config import Settings
from gpuslo.engine.engine_health import EngineHealth
from gpuslo.engine.engine_process import EngineProcess
from gpuslo.engine.engine_thread import Runtime
from gpuslo.engine.errors import FieldProblem
from gpuslo.engine.events import Event
from gpuslo.engine.housekeeping import RETENTION_INTERVAL_S
from gpuslo.engine.ingest import Ingest
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.metrics_state import StateCollector, StateSnapshot
from gpuslo.engine.rulebook.model import SEVERITIES
from gpuslo.engine.services.accounts import Accounts
from gpuslo.engine.services.changes import Changes, Notifier
from gpuslo.engine.services.lifecycle import LIFECYCLE_INTERVAL_S, Lifecycle
from gpuslo.engine.services.notifications import Notifications
from gpuslo.engine.services.queries import Queries
from gpuslo.engine.services.rulebooks import Rulebooks
from gpuslo.engine.services.slos import Slos
from gpuslo.engine.slo.metrics import SloCollector
from gpuslo.engine.stall_causes import CLUSTER_INTERVAL_S, StallCauses
from gpuslo.engine.store import charts
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.durability import check_durability
from gpuslo.engine.store.engine_io import EngineStore

Publish = Callable[[Sequence[Event]], list[str]]


def delivery_policy(settings: Settings) -> DeliveryPolicy:
    """The delivery worker's policy from the settings (the rest are DeliveryPolicy's defaults)."""
    return DeliveryPolicy(per_receiver=settings.delivery_per_receiver,
                          max_age_s=settings.notification_max_age_hours * 3600,
                          dead_letter=settings.dead_letter_receiver or None)


class Gpuslo:
    """One gpuslo instance: ingest → store → engine → violations, its periodic jobs, and its services:
    `rulebooks`, `lifecycle`, `queries`, `notifications`, `slos`, `accounts` (gpuslo.engine.services)."""

    def __init__(self, settings: Settings, database: Database, metrics: Metrics):
        self.settings, self.database, self.metrics = settings, database, metrics
        # Alerting (optional): routing config; the outbox rows of a change are written in its transaction.
        self.alerts: AlertsConfig | None = (load_alerts_config(settings.alerts_config)
                                            if settings.alerts_config else None)
        notify = Notifier(self.alerts, settings.public_url)
        changes = Changes(database, notify)
        self.slos = Slos(database, lambda: self.runtime.evaluator.slo.slis)
        self.engine_store = EngineStore(database, metrics, notify, self.slos.burn_rules)
        self.runtime: Runtime | EngineProcess = (
            EngineProcess(settings, database, metrics) if settings.engine_process else
            Runtime(sink=self.engine_store.record, queue_size=settings.engine_queue_size, metrics=metrics,
                    refill=self.engine_store.refill, max_ahead_s=settings.max_clock_skew_seconds,
                    quarantine=self.engine_store.quarantine))
        self.ingest = Ingest(database, metrics, self.runtime.submit, settings.max_clock_skew_seconds)
        if isinstance(self.runtime, EngineProcess):
            self.ingest.submit_bodies = self.runtime.submit_bodies
        self.rulebooks = Rulebooks(settings, database, self.runtime, self.slos.stored_buckets)
        self.lifecycle = Lifecycle(changes, self.rulebooks.quiet_by_rule)
        self.queries = Queries(database)
        self.accounts = Accounts(database)
        self.stall_causes = StallCauses(database)  # clustered stall causes, for the "Stall causes" page
        self.delivery = DeliveryWorker(database, self.alerts, delivery_policy(settings),
                                       metrics=DeliveryMetrics(self.alerts.receivers, metrics.registry)) \
            if self.alerts else None
        self.resender = (AlertmanagerResender(
            database, [r for r in self.alerts.receivers.values() if isinstance(r, AlertmanagerReceiver)],
            self.alerts.target_policy, settings.public_url) if self.alerts else None)
        self.notifications = Notifications(changes, self.alerts, self.delivery)
        # Fleet mode (`serve --bus`): valid events go to the bus and the workers store and evaluate them.
        self.publish: Publish | None = None
        # Read at every scrape (the registry collects once on registration, so the services exist first).
        metrics.registry.register(StateCollector(self._state_snapshot, SEVERITIES, charts.ACTIVE_STATUSES))
        metrics.registry.register(SloCollector(self.slos.groups))
        self.scheduler = self._schedule()

    def _schedule(self) -> BackgroundScheduler:
        """The periodic jobs, started by open(): auto-resolve and silence expiry, retention, SLO retention,
        stall clustering, the rules watcher, outbox delivery and the Alertmanager re-sends."""
        scheduler = BackgroundScheduler(timezone=UTC)
        jobs: list[tuple[str, Callable[[], object], float]] = [
            ("lifecycle", self.lifecycle.run_lifecycle, LIFECYCLE_INTERVAL_S),
            ("retention", self.run_retention, RETENTION_INTERVAL_S),
            ("slo-retention", self.slos.run_retention, RETENTION_INTERVAL_S),
            ("stall-causes", self.stall_causes.run, CLUSTER_INTERVAL_S),
        ]
        if self.settings.rules_poll_seconds > 0:  # hot reload when a rulebook file changes
            jobs.append(("rules-watch", self.rulebooks.reload_if_changed, self.settings.rules_poll_seconds))
        for job_id, run, seconds in jobs:
            scheduler.add_job(run, "interval", seconds=seconds, id=job_id, max_instances=1, coalesce=True)
        if self.delivery:
            self.delivery.install(scheduler)
        if self.resender:
            self.resender.install(scheduler)
        return scheduler

    @classmethod
    def open(cls, settings: Settings, *, publish: Publish | None = None,
             leader: Callable[[], bool] | None = None) -> Gpuslo:
        """Migrate the database, load the rulebooks and start the engine.

        Fleet mode: `publish` takes the engine's place (no engine thread here), and the periodic jobs run only
        while `leader()` says this process leads the fleet.
        """
        database = Database(settings.database_url)
        database.upgrade()
        check_durability(database, allow_unsafe=settings.allow_unsafe_durability)
        core = cls(settings, database, Metrics())
        core.rulebooks.reload()
        core.publish = publish
        core.ingest.publish = publish
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

    def ingest_refused(self, status: int) -> None:
        """Count a request refused whole (bad JSON, 413, 415, 429, ...): its events were never looked at."""
        self.metrics.ingest_requests_refused.labels(str(status)).inc()

    def ingest_rejected(self, problem: FieldProblem) -> None:
        """Count an item refused before it reached `ingest` (an NDJSON line that is not JSON)."""
        self.ingest.rejected("unknown", problem)

    def engine_health(self) -> EngineHealth:
        if self.publish is not None:  # fleet mode: the workers evaluate; this replica only publishes
            return EngineHealth(True)
        return self.runtime.health()

    def ping_database(self) -> bool:
        """Whether the database answers a query now (the health check); raises what the driver raised if not."""
        with self.database.session() as session:
            session.execute(text("SELECT 1"))
        return True

    def wait_idle(self, timeout: float = 10.0) -> bool:
        return self.runtime.wait_idle(timeout)

    def run_retention(self, now: datetime | None = None) -> int:
        """The periodic job: prune raw events older than `event_retention_days` (evidence is kept), ended login
        sessions, and the audit log when `audit_retention_days` is set; the number of events pruned."""
        return housekeeping.run_retention(self.database, self.settings, now or datetime.now(UTC),
                                          RETENTION_INTERVAL_S)

    def _state_snapshot(self) -> StateSnapshot:
        """What /metrics reads at scrape time (metrics_state)."""
        with self.database.session(readonly=True) as session:
            counts = charts.count_open_violations(session)
        status = self.rulebooks.status()
        return StateSnapshot(counts, self.runtime.running, len(status.rulebooks), len(status.problems))


def _led(leader: Callable[[], bool], job: Callable[..., object]) -> Callable[..., object]:
    """A periodic job that runs only in the fleet's leader."""
    def run(*args: object, **kwargs: object) -> object:
        return job(*args, **kwargs) if leader() else None
    return run
