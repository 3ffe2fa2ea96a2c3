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

from gpuslo.engine.alerts.egress import GuardedClients, Resolver, system_resolver
from gpuslo.engine.alerts.notification import Notification
from gpuslo.engine.alerts.routing import AlertsConfig, TokenBuckets
from gpuslo.engine.alerts.secrets import redact, scrub
from gpuslo.engine.alerts.transport import Outcome, send
from gpuslo.engine.errors import ConfigError, GpusloError
from gpuslo.engine.store import outbox
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.outbox import Attempt, NotificationView

log = logging.getLogger(__name__)
JOB_ID = "alerts-delivery"


@dataclass(frozen=True)
class DeliveryPolicy:
    """Timeouts, batch size, lease and back-off of the delivery worker."""

    timeout_s: float = 10.0
    batch: int = 5
    lease_s: float = 180.0
    base_delay_s: float = 2.0
    max_delay_s: float = 600.0
    max_attempts: int = 15

    def __post_init__(self) -> None:
        # A lease shorter than a batch's worst case would let a second worker send rows this one still holds;
        # httpx applies the timeout per phase (connect, write, read), hence the factor 3.
        if self.lease_s <= self.batch * self.timeout_s * 3:
            raise ConfigError(f"delivery lease {self.lease_s}s must exceed 3 x batch x timeout "
                              f"({self.batch} x {self.timeout_s}s)")


def backoff(attempts: int, policy: DeliveryPolicy, rng: random.Random) -> float:
    """Exponential back-off with jitter: half the capped delay plus a random half."""
    delay = min(policy.max_delay_s, policy.base_delay_s * 2 ** max(0, attempts - 1))
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
    """Sends what the outbox holds for the receivers of one AlertsConfig."""

    def __init__(self, database: Database, config: AlertsConfig, policy: DeliveryPolicy | None = None, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC), rng: random.Random | None = None,
                 resolver: Resolver = system_resolver):
        self.database, self.config = database, config
        self.policy = policy or DeliveryPolicy()
        self.clock = clock
        self.rng = rng or random.Random()
        self.buckets = TokenBuckets(config.rate_limits)
        # Receivers' hosts are resolved again and vetted at each new connection (egress), with `resolver`.
        self.clients = GuardedClients(self.policy.timeout_s, resolver)
        # httpx logs every request URL at INFO, and a Slack webhook URL is a secret.
        self._scrubber = SecretScrubber(config.secret_values())
        logging.getLogger("httpx").addFilter(self._scrubber)

    def close(self) -> None:
        logging.getLogger("httpx").removeFilter(self._scrubber)
        self.clients.close()

    def install(self, scheduler: Any, interval_s: float = 1.0) -> None:
        """Add the delivery job to an APScheduler 3 scheduler (one running instance, missed runs coalesced)."""
        scheduler.add_job(self.run_once, "interval", seconds=interval_s, id=JOB_ID, max_instances=1,
                          coalesce=True, replace_existing=True)

    def run_once(self) -> int:
        """Claim one batch and deliver it; the number of rows handled (0: nothing was due)."""
        with self.database.session() as session:
            claimed = outbox.claim(session, self.clock(), lease_s=self.policy.lease_s, limit=self.policy.batch)
        for row in claimed:
            try:
                self._deliver(row)
            except GpusloError as exc:  # a store hiccup: the lease expires and the row is sent again later
                log.error("notification %d to %s: could not record the attempt: %s", row.id, row.receiver, exc)
        return len(claimed)

    def run_until_idle(self, timeout_s: float = 30.0) -> None:
        """Deliver batches until nothing is due now (tests, one-shot flushes); rows due later are left."""
        deadline = time.monotonic() + timeout_s
        while self.run_once() and time.monotonic() < deadline:
            pass

    def _deliver(self, row: NotificationView) -> None:
        receiver = self.config.receivers.get(row.receiver)
        if receiver is None:
            self._finish(row, Outcome("dead", 0, error=f"receiver '{row.receiver}' is not configured any more"))
            return
        wait = self.buckets.take(row.receiver, time.monotonic())
        if wait > 0:
            with self.database.session() as session:
                outbox.postpone(session, row, self.clock() + timedelta(seconds=wait))
            return
        notification = Notification.from_dict(row.payload)
        request = receiver.render(notification, message_id(row.id), self.clock())
        client = self.clients.get(self.config.target_policy(row.receiver))
        self._finish(row, send(client, request, self.clock()))

    def _finish(self, row: NotificationView, outcome: Outcome) -> None:
        status, retry_at = outcome.status, None
        if status == "retry" and row.attempts >= self.policy.max_attempts:
            status = "dead"
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
        if status == "delivered":
            log.info("notification %d (%s %s) delivered to %s", row.id, row.action, row.dedup_key, row.receiver)
        else:
            log.warning("notification %d (%s %s) to %s: %s, attempt %d: %s", row.id, row.action, row.dedup_key,
                        row.receiver, status, row.attempts, error)
