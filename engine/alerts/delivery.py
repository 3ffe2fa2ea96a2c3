"""The delivery worker: claim due outbox rows, send them, record each attempt, retry with back-off or give up.

Run `run_once` from a scheduler job (one job per process: `max_instances=1`). A crash between send and record
leaves the row `delivering`; when its lease runs out another run sends it again with the same dedup key and
webhook-id, so receivers see the repeat as the same incident (at-least-once delivery).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.orm import Session

from gpuslo.engine.alerts.delivery_metrics import DeliveryMetrics
from gpuslo.engine.alerts.egress import GuardedClients, Resolver, system_resolver
from gpuslo.engine.alerts.lanes import Lane
from gpuslo.engine.alerts.notification import HttpRequest, Notification
from gpuslo.engine.alerts.routing import AlertsConfig, TokenBuckets
from gpuslo.engine.alerts.secrets import redact, scrub
from gpuslo.engine.alerts.transport import Outcome, send
from gpuslo.engine.errors import ConfigError, GpusloError
from gpuslo.engine.store import outbox, receivers
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.outbox import Attempt, NotificationView
from gpuslo.engine.store.receivers import ReceiverHealth

log = logging.getLogger(__name__)
# Sends one rendered request: transport.send; the stateful model of the outbox scripts outcomes through it.
Sender = Callable[[httpx.Client, HttpRequest, datetime], Outcome]
JOB_ID = "alerts-delivery"


@dataclass(frozen=True)
class DeliveryPolicy:
    """Timeouts, lane width, lease, back-off, maximum age and the dead-letter receiver of the delivery worker."""

    timeout_s: float = 10.0
    per_receiver: int = 2  # threads of each receiver's lane: the most notifications in flight to one receiver
    lease_s: float = 180.0
    base_delay_s: float = 2.0
    max_delay_s: float = 600.0
    max_attempts: int = 15
    max_age_s: float = 0.0  # a notification older than this goes dead (and to `dead_letter`); 0: no maximum
    dead_letter: str | None = None  # the receiver that gets a copy of every notification that goes dead
    interval_s: float = 0.5  # how often the dispatcher fills idle lanes (a busy lane refills itself at once)

    def __post_init__(self) -> None:
        if self.per_receiver < 1:
            raise ConfigError(f"delivery per_receiver must be at least 1, got {self.per_receiver}")
        # Rows are claimed only for threads free to send them at once, so a lease must outlast one send; httpx
        # applies the timeout per phase (connect, write, read), hence the factor 3.
        if self.lease_s <= self.timeout_s * 3:
            raise ConfigError(f"delivery lease {self.lease_s}s must exceed 3 x the timeout ({self.timeout_s}s)")
        if self.max_age_s < 0:
            raise ConfigError(f"notification max age must be 0 (none) or positive, got {self.max_age_s}s")


def backoff(attempts: int, policy: DeliveryPolicy, rng: random.Random) -> float:
    """Exponential back-off with jitter: half the capped delay plus a random half."""
    delay = min(policy.max_delay_s, policy.base_delay_s * 2.0 ** max(0, attempts - 1))
    return delay / 2 + rng.uniform(0, delay / 2)


def message_id(notification_id: int) -> str:
    """The webhook-id of an outbox row: the same on every retry and after every restart."""
    return f"msg_gpuslo_{notification_id}"


class SecretScrubber(logging.Filter):
    """Rewrites log records of a library logger with every secret value replaced by ***."""

    def __init__(self, secrets: tuple[str, ...]):
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            record.msg, record.args = redact(record.getMessage(), self.secrets), None
        return True


class DeliveryWorker:
    """Sends what the outbox holds for the receivers of one AlertsConfig, each receiver on its own lane.

    `dispatch` (the scheduler's job) never waits on a send: it expires old rows, settles rows of receivers no
    longer configured and fills the free threads of every enabled receiver's lane. A lane that finishes a send
    claims that receiver's next row at once (when installed on a scheduler), so a hanging receiver slows only
    itself. `run_once` dispatches and waits for the sends (tests, one-shot flushes).
    """

    def __init__(self, database: Database, config: AlertsConfig, policy: DeliveryPolicy | None = None, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC), rng: random.Random | None = None,
                 resolver: Resolver = system_resolver, metrics: DeliveryMetrics | None = None,
                 sender: Sender = send):
        self.database, self.config = database, config
        self.policy = policy or DeliveryPolicy()
        if self.policy.dead_letter is not None and self.policy.dead_letter not in config.receivers:
            raise ConfigError(f"dead_letter_receiver {self.policy.dead_letter!r} is not a receiver of "
                              f"{config.source or 'the alerts config'}")
        self.clock, self.sender = clock, sender
        self.rng = rng or random.Random()
        self.buckets = TokenBuckets(config.rate_limits)
        # Receivers' hosts are resolved again and vetted at each new connection (egress), with `resolver`.
        self.clients = GuardedClients(self.policy.timeout_s, resolver)
        self.metrics = metrics or DeliveryMetrics(config.receivers)
        self._lanes = {name: Lane(name, self.policy.per_receiver) for name in config.receivers}
        self._disabled: set[str] = set()
        self._background = self._stopping = False
        self._gauges_due = self._settle_due = 0.0
        # httpx logs every request URL at INFO, and a Slack webhook URL is a secret.
        self._scrubber = SecretScrubber(config.secret_values())
        logging.getLogger("httpx").addFilter(self._scrubber)

    def close(self) -> None:
        """Stop taking work, give sends under way a moment to record, then close the HTTP clients."""
        self._stopping = True
        for lane in self._lanes.values():
            lane.close()
        deadline = time.monotonic() + min(5.0, self.policy.timeout_s * 3)
        for lane in self._lanes.values():
            lane.wait(max(0.0, deadline - time.monotonic()))
        logging.getLogger("httpx").removeFilter(self._scrubber)
        self.clients.close()

    def install(self, scheduler: Any, interval_s: float | None = None) -> None:
        """Add the dispatcher to an APScheduler 3 scheduler (one running instance, missed runs coalesced)."""
        self._background = True
        scheduler.add_job(self.dispatch, "interval", seconds=interval_s or self.policy.interval_s, id=JOB_ID,
                          max_instances=1, coalesce=True, replace_existing=True)

    def dispatch(self) -> int:
        """One round: expire, settle unconfigured rows, fill every enabled lane; rows handed on (never waits)."""
        if self._stopping:
            return 0
        try:
            with self.database.session(readonly=True) as session:
                self._disabled = receivers.disabled(session)
            self.metrics.disabled_set(self._disabled)
            handled = self._expire() + self._settle_unconfigured()
        except GpusloError as exc:
            log.error("delivery dispatch: %s", exc)
            return 0
        for name, lane in self._lanes.items():
            if name not in self._disabled:
                handled += self._fill(name, lane)
        self._update_gauges()
        return handled

    def run_once(self) -> int:
        """Dispatch one round and wait until its sends are recorded; the number of rows handled."""
        handled = self.dispatch()
        self.wait_idle()
        return handled

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no lane is sending; True when all are idle."""
        return all([lane.wait(timeout_s) for lane in self._lanes.values()])

    def run_until_idle(self, timeout_s: float = 30.0) -> None:
        """Deliver until nothing is due now (tests, one-shot flushes); rows due later are left."""
        deadline = time.monotonic() + timeout_s
        while self.run_once() and time.monotonic() < deadline:
            pass

    def health(self) -> list[ReceiverHealth]:
        """Every receiver's last success and failure, disabled state and queue (the notifications page)."""
        with self.database.session(readonly=True) as session:
            return receivers.health(session, self.config.receivers)

    def _fill(self, name: str, lane: Lane) -> int:
        slots = lane.reserve()
        if not slots:
            return 0
        try:
            with self.database.session() as session:
                claimed = outbox.claim(session, self.clock(), lease_s=self.policy.lease_s, limit=slots,
                                       receiver=name)
        except GpusloError as exc:
            lane.release(slots)
            log.error("delivery to %s: could not claim notifications: %s", name, exc)
            return 0
        lane.release(slots - len(claimed))
        refill = (lambda: self._refill(name, lane)) if self._background else None
        for row in claimed:
            lane.run(lambda row=row: self._send_one(row), refill)  # type: ignore[misc]
        return len(claimed)

    def _refill(self, name: str, lane: Lane) -> None:
        if not self._stopping and name not in self._disabled:
            self._fill(name, lane)

    def _send_one(self, row: NotificationView) -> None:
        try:
            self._deliver(row)
        except GpusloError as exc:  # a store hiccup: the lease expires and the row is sent again later
            log.error("notification %d to %s: could not record the attempt: %s", row.id, row.receiver, exc)
        except Exception:  # a lane thread never dies silently; the row is sent again when its lease expires
            log.exception("notification %d to %s: delivery failed unexpectedly", row.id, row.receiver)

    def _settle_unconfigured(self) -> int:
        # Rows of a removed receiver appear only after a config change: looking every 10 s is plenty.
        if time.monotonic() < self._settle_due:
            return 0
        self._settle_due = time.monotonic() + 10.0
        with self.database.session() as session:
            claimed = outbox.claim(session, self.clock(), lease_s=self.policy.lease_s, limit=100,
                                   not_in=list(self.config.receivers))
        for row in claimed:
            self._finish(row, Outcome("dead", 0, error=f"receiver '{row.receiver}' is not configured any more",
                                      reason="unconfigured"))
        return len(claimed)

    def _expire(self) -> int:
        if self.policy.max_age_s <= 0:
            return 0
        now = self.clock()
        error = f"expired: not delivered within the maximum age of {self.policy.max_age_s:g} s"
        with self.database.session() as session:
            dead = outbox.expire_stale(session, now, created_before=now - timedelta(seconds=self.policy.max_age_s),
                                       error=error)
            for row in dead:
                outbox.record_dead(session, row, response_code=None, error=error, now=now)
                self._forward(session, row, now)
        for row in dead:
            self.metrics.count(row.receiver, "dead", "max_age")
            log.warning("notification %d (%s %s) to %s: %s", row.id, row.action, row.dedup_key, row.receiver, error)
        return len(dead)

    def _forward(self, session: Session, row: NotificationView, now: datetime) -> None:
        if self.policy.dead_letter is not None:
            outbox.forward_dead(session, row, self.policy.dead_letter, now)

    def _update_gauges(self) -> None:
        if time.monotonic() < self._gauges_due:
            return
        self._gauges_due = time.monotonic() + 2.0
        try:
            with self.database.session(readonly=True) as session:
                counts = receivers.queue_counts(session)
        except GpusloError as exc:
            log.warning("delivery metrics: %s", exc)
            return
        self.metrics.queues(counts)

    def _deliver(self, row: NotificationView) -> None:
        receiver = self.config.receivers[row.receiver]
        wait = self.buckets.take(row.receiver, time.monotonic())
        if wait > 0:
            with self.database.session() as session:
                outbox.postpone(session, row, self.clock() + timedelta(seconds=wait))
            self.metrics.count(row.receiver, "postponed", "rate_limited")
            return
        notification = Notification.from_dict(row.payload)
        request = receiver.render(notification, message_id(row.id), self.clock())
        client = self.clients.get(self.config.target_policy(row.receiver))
        self._finish(row, self.sender(client, request, self.clock()))

    def _finish(self, row: NotificationView, outcome: Outcome) -> None:
        if outcome.status == "gone":
            self._disable(row, outcome)
            return
        status, reason, retry_at = outcome.status, outcome.reason, None
        if status == "retry" and row.attempts >= self.policy.max_attempts:
            status, reason = "dead", "max_attempts"
        if status == "retry":
            delay = backoff(row.attempts, self.policy, self.rng)
            if outcome.retry_after is not None:
                delay = max(delay, outcome.retry_after)
            retry_at = self.clock() + timedelta(seconds=delay)
        secrets = self.config.secret_values()
        error = redact(outcome.error, secrets) if outcome.error else None
        attempt = Attempt(status, outcome.latency_ms, outcome.response_code, error)
        with self.database.session() as session:
            now = self.clock()
            if outbox.finish(session, row, attempt, now, retry_at) and status == "dead":
                # The history is served as stored (no display scrub), so its error is the one the attempt shows.
                outbox.record_dead(session, row, response_code=outcome.response_code, error=scrub(error, secrets),
                                   now=now)
                self._forward(session, row, now)
            if status == "delivered":
                receivers.note_success(session, row.receiver, now)
            else:
                receivers.note_failure(session, row.receiver, now, error)
        self.metrics.count(row.receiver, status, reason)
        if status == "delivered":
            log.info("notification %d (%s %s) delivered to %s", row.id, row.action, row.dedup_key, row.receiver)
        else:
            log.warning("notification %d (%s %s) to %s: %s, attempt %d: %s", row.id, row.action, row.dedup_key,
                        row.receiver, status, row.attempts, error)

    def _disable(self, row: NotificationView, outcome: Outcome) -> None:
        """410 Gone: the row waits (pending) and its receiver is disabled until an operator re-enables it."""
        error = redact(f"{outcome.error or 'HTTP 410'}; receiver disabled until re-enabled",
                       self.config.secret_values())
        with self.database.session() as session:
            now = self.clock()
            outbox.finish(session, row, Attempt("retry", outcome.latency_ms, outcome.response_code, error), now, now)
            receivers.note_failure(session, row.receiver, now, error)
            receivers.disable(session, row.receiver, now, f"HTTP 410 Gone on notification {row.id}")
        self._disabled.add(row.receiver)
        self.metrics.disabled_set(self._disabled)
        self.metrics.count(row.receiver, "disabled", "http_410")
        log.error("receiver %s answered 410 Gone: disabled; its notifications wait until an operator re-enables it "
                  "(`gpuslo alerts enable-receiver %s`, the notifications page or the API)", row.receiver,
                  row.receiver)
