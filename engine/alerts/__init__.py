"""Alerting: receivers (PagerDuty, Slack, Opsgenie, signed webhooks), routing from alerts.yaml, and delivery
through the transactional outbox (gpuslo.engine.store.outbox)."""

from gpuslo.engine.alerts.delivery import DeliveryPolicy, DeliveryWorker
from gpuslo.engine.alerts.enqueue import (
    add_for_change,
    enqueue_for_change,
    enqueue_for_match,
    enqueue_for_transition,
)
from gpuslo.engine.alerts.loader import load_alerts_config, load_alerts_text
from gpuslo.engine.alerts.notification import HttpRequest, Notification, Receiver
from gpuslo.engine.alerts.routing import AlertsConfig
from gpuslo.engine.alerts.testsend import AlertTestResult, send_test

__all__ = [
    "AlertTestResult",
    "AlertsConfig",
    "DeliveryPolicy",
    "DeliveryWorker",
    "HttpRequest",
    "Notification",
    "Receiver",
    "add_for_change",
    "enqueue_for_change",
    "enqueue_for_match",
    "enqueue_for_transition",
    "load_alerts_config",
    "load_alerts_text",
    "send_test",
]
