"""The outbox as people see it: a violation's notifications, filtered pages, the retry of a dead letter, and
the health of every receiver with the re-enable of one that a 410 Gone disabled."""

from __future__ import annotations

import logging

from gpuslo.engine.alerts import AlertsConfig, DeliveryWorker
from gpuslo.engine.errors import NotFoundError
from gpuslo.engine.services.changes import Changes, utcnow
from gpuslo.engine.store import audit, notifications, receivers
from gpuslo.engine.store.audit import AuditNote
from gpuslo.engine.store.notifications import NotificationDetail, NotificationFilter
from gpuslo.engine.store.outbox import NotificationView
from gpuslo.engine.store.read_models import Page
from gpuslo.engine.store.receivers import ReceiverHealth

log = logging.getLogger(__name__)


class Notifications:
    """Notifications and receivers of one core; `alerts` and `delivery` are None when alerting is off."""

    def __init__(self, changes: Changes, alerts: AlertsConfig | None, delivery: DeliveryWorker | None):
        self._changes, self._database = changes, changes.database
        self._alerts, self._delivery = alerts, delivery

    def of_violation(self, violation_id: int) -> tuple[NotificationDetail, ...] | None:
        """Every notification of a violation, oldest first, with its attempts; None when no such violation."""
        with self._database.session(readonly=True) as session:
            return notifications.of_violation(session, violation_id)

    def page(self, filters: NotificationFilter, *, page: int = 1, page_size: int = 50) -> Page[NotificationDetail]:
        """A page of notifications, newest first."""
        with self._database.session(readonly=True) as session:
            return notifications.page_notifications(session, filters, page=page, page_size=page_size)

    def receiver_names(self) -> list[str]:
        """Every receiver a notification was ever written for (the page's filter choices)."""
        with self._database.session(readonly=True) as session:
            return notifications.receivers(session)

    def detail(self, notification_id: int) -> NotificationDetail | None:
        with self._database.session(readonly=True) as session:
            return notifications.get_detail(session, notification_id)

    def retry(self, notification_id: int, *, actor: str, source: str | None = None) -> NotificationView:
        """Send a dead notification again (fresh attempt count, due now), noted in the violation's history and the
        audit log; 409 InvalidTransition when not dead."""
        return self._changes.apply(lambda s: notifications.retry(s, notification_id, utcnow(), actor=actor,
                                                                 source=source),
                                   AuditNote("notification.retry", "notification", notification_id, actor, source))

    def receiver_health(self) -> list[ReceiverHealth]:
        """Every receiver's health (last success and failure, disabled, queue); empty without alerting."""
        if self._delivery is None:
            return []
        return self._delivery.health()

    def enable_receiver(self, name: str, *, actor: str, source: str | None = None) -> ReceiverHealth:
        """Re-enable a receiver disabled by a 410 Gone; its waiting notifications go out again. Audited;
        NotFoundError for an unknown receiver, InvalidTransition (409) when it is not disabled."""
        if self._alerts is None or name not in self._alerts.receivers:
            raise NotFoundError(f"no receiver named {name!r} in the alerts config")
        with self._database.session() as session:
            before, after = receivers.enable(session, name)
            audit.record(session, at=utcnow(), actor=actor, action="receiver.enable", target_type="receiver",
                         target_id=name, before=before.to_dict(), after=after.to_dict(), source_ip=source)
        log.info("receiver %s re-enabled by %s", name, actor)
        return after
