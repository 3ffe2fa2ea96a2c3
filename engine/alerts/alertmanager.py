"""Alertmanager's own API: POST an array of PostableAlerts to /api/v2/alerts, as Prometheus does.

A firing alert carries `endsAt` = now + 4 × the resend interval and is re-sent every interval while the violation
is open (`AlertmanagerResender`), so Alertmanager resolves it by itself if gpuslo goes away; a resolve sends the
same labels with `endsAt` = now. Labels identify the alert in Alertmanager: one violation is one label set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import select

from gpuslo.engine.alerts.egress import GuardedClients, Resolver, TargetPolicy, system_resolver
from gpuslo.engine.alerts.notification import HttpRequest, Notification, Receiver
from gpuslo.engine.alerts.receiver_config import ConfigProblems, ReceiverType, Target
from gpuslo.engine.alerts.secrets import Secret
from gpuslo.engine.alerts.transport import send
from gpuslo.engine.events import format_time
from gpuslo.engine.rulebook.marked_yaml import Path_
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.models import ViolationRow
from gpuslo.engine.store.outbox_models import NotificationRow
from gpuslo.engine.store.rows import violation_view

log = logging.getLogger(__name__)
API_PATH = "/api/v2/alerts"
RESEND_JOB_ID = "alertmanager-resend"


def api_url(url: str) -> str:
    """The PostableAlerts endpoint of an Alertmanager given by its base URL or by the endpoint itself."""
    stripped = url.rstrip("/")
    return stripped if stripped.endswith(API_PATH) else stripped + API_PATH


def alert_labels(n: Notification) -> dict[str, str]:
    """The label set of a violation's alert: rule, severity, SLO, where, and the violation's own id."""
    labels = {**{str(k): str(v) for k, v in n.labels.items()}, "alertname": n.rule, "severity": n.severity,
              "slo": n.slo, "gpuslo_violation": str(n.violation_id)}
    if n.host:
        labels["host"] = n.host
    if n.gpu is not None:
        labels["gpu"] = str(n.gpu)
    return labels


def postable_alert(n: Notification, now: datetime, resend_interval_s: float) -> dict[str, Any]:
    """One PostableAlert; a trigger stays firing for 4 resend intervals unless it is sent again."""
    annotations = {"summary": n.summary, "description": n.rule_title}
    if n.runbook:
        annotations["runbook_url"] = n.runbook
    ends = now if n.action == "resolve" else now + timedelta(seconds=4 * resend_interval_s)
    starts = n.first_seen or format_time(now)
    return {"labels": alert_labels(n), "annotations": annotations, "startsAt": starts,
            "endsAt": format_time(max(ends, _parse(starts))), "generatorURL": n.url}


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class AlertmanagerReceiver:
    """Posts to one Alertmanager (or an HA pair behind one URL); `token` is an optional bearer token."""

    name: str
    url: str
    token: Secret | None = None
    resend_interval_s: float = 60.0
    kind: ClassVar[str] = "alertmanager"
    # Alertmanager knows firing and resolved only; an acknowledgement would read as a new firing.
    actions: ClassVar[frozenset[str]] = frozenset({"trigger", "resolve"})

    def render(self, notification: Notification, message_id: str, now: datetime) -> HttpRequest:
        return self.render_many([notification], now)

    def render_many(self, notifications: Iterable[Notification], now: datetime) -> HttpRequest:
        body = [postable_alert(n, now, self.resend_interval_s) for n in notifications]
        headers = {"Content-Type": "application/json"}
        secrets: tuple[str, ...] = ()
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token.value}"
            secrets = (self.token.value,)
        return HttpRequest("POST", api_url(self.url),
                           headers, json.dumps(body, separators=(",", ":"), sort_keys=True).encode(), secrets)


class AlertmanagerResender:
    """Re-sends every firing alert to each Alertmanager receiver once per its resend interval.

    Only violations still open or acknowledged whose trigger was delivered to that receiver are re-sent; the
    trigger and the resolve themselves go through the outbox (durable, retried). This is a state sync: a lost
    re-send is repaired by the next one."""

    def __init__(self, database: Database, receivers: Iterable[AlertmanagerReceiver],
                 policies: Callable[[str], TargetPolicy], public_url: str, *, timeout_s: float = 10.0,
                 resolver: Resolver = system_resolver, clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.database, self.receivers, self.policies = database, tuple(receivers), policies
        self.public_url, self.clock = public_url, clock
        self.clients = GuardedClients(timeout_s, resolver)
        self._last: dict[str, float] = {}

    @property
    def interval_s(self) -> float:
        return min((r.resend_interval_s for r in self.receivers), default=60.0)

    def install(self, scheduler: Any) -> None:
        if self.receivers:
            scheduler.add_job(self.run_once, "interval", seconds=self.interval_s, id=RESEND_JOB_ID,
                              max_instances=1, coalesce=True, replace_existing=True)

    def close(self) -> None:
        self.clients.close()

    def firing(self, receiver: str) -> list[Notification]:
        """Notifications of the violations still firing at `receiver` (their trigger was delivered there)."""
        from gpuslo.engine.alerts.enqueue import notification_of  # enqueue imports the store's outbox helpers

        with self.database.session(readonly=True) as session:
            delivered = (select(NotificationRow.violation_id)
                         .where(NotificationRow.receiver == receiver, NotificationRow.action == "trigger",
                                NotificationRow.status == "delivered"))
            rows = session.scalars(select(ViolationRow).where(ViolationRow.id.in_(delivered),
                                                              ViolationRow.status != "resolved"))
            return [notification_of(violation_view(row), "trigger", self.public_url) for row in rows]

    def run_once(self) -> dict[str, int]:
        """Re-send to every receiver; the number of alerts each was sent (-1: the send failed)."""
        sent: dict[str, int] = {}
        for receiver in self.receivers:
            alerts = self.firing(receiver.name)
            if not alerts:
                sent[receiver.name] = 0
                continue
            now = self.clock()
            outcome = send(self.clients.get(self.policies(receiver.name)), receiver.render_many(alerts, now), now)
            if outcome.status == "delivered":
                sent[receiver.name] = len(alerts)
            else:
                sent[receiver.name] = -1
                log.warning("alertmanager %s: re-sending %d firing alerts failed: %s", receiver.name, len(alerts),
                            outcome.error)
        return sent


def parse_config(problems: ConfigProblems, item: dict[str, Any], path: Path_, target: Target) -> Receiver | None:
    """`url` (the Alertmanager or its /api/v2/alerts), an optional bearer `token` and `resend_interval` (1m)."""
    url = problems.url(item.get("url"), (*path, "url"), target, secret_allowed=False)
    token = problems.secret(item["token"], (*path, "token")) if "token" in item else None
    interval = problems.duration(item.get("resend_interval"), (*path, "resend_interval"), 60.0)
    if interval < 1:
        problems.add((*path, "resend_interval"), "resend_interval must be at least 1s")
        return None
    if "token" in item and token is None:
        return None
    return AlertmanagerReceiver(target[0], str(url), token, interval) if url else None


RECEIVER_TYPE = ReceiverType("alertmanager", frozenset({"url", "token", "resend_interval"}), parse_config)
