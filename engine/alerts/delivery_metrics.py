"""Delivery's Prometheus series: outcomes per receiver and reason, queue depth, and the disabled state.

Every label comes from a fixed set: receiver names from alerts.yaml (rows of a receiver no longer configured
count under UNCONFIGURED), outcomes from OUTCOMES, reasons from transport.REASONS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge

from gpuslo.engine.alerts.transport import REASONS

OUTCOMES = ("delivered", "retry", "dead", "disabled", "postponed")
UNCONFIGURED = "(unconfigured)"


class DeliveryMetrics:
    """The series the delivery worker updates; registered in the core's registry (or a private one)."""

    def __init__(self, receivers: Iterable[str], registry: CollectorRegistry | None = None):
        self.receivers = frozenset(receivers)
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.outcomes = Counter(
            "gpuslo_notification_deliveries", "Delivery attempts by receiver, outcome and reason.",
            ["receiver", "outcome", "reason"], registry=self.registry)
        self.queue_depth = Gauge(
            "gpuslo_notification_queue_depth", "Notifications waiting (pending or being sent), by receiver.",
            ["receiver"], registry=self.registry)
        self.dead = Gauge(
            "gpuslo_notifications_dead", "Notifications given up on and not retried yet, by receiver.",
            ["receiver"], registry=self.registry)
        self.disabled = Gauge(
            "gpuslo_receiver_disabled", "1 while a receiver is disabled (it answered 410 Gone), else 0.",
            ["receiver"], registry=self.registry)
        for name in self.receivers:  # every series exists from the start, at zero
            self.queue_depth.labels(name)
            self.dead.labels(name)
            self.disabled.labels(name)

    def label(self, receiver: str) -> str:
        return receiver if receiver in self.receivers else UNCONFIGURED

    def count(self, receiver: str, outcome: str, reason: str) -> None:
        if outcome not in OUTCOMES or reason not in REASONS:
            raise ValueError(f"delivery metric: unknown outcome {outcome!r} or reason {reason!r}")
        self.outcomes.labels(self.label(receiver), outcome, reason).inc()

    def queues(self, counts: Mapping[str, Mapping[str, int]]) -> None:
        """Set queue depth and dead of every configured receiver from one grouped count."""
        for name in self.receivers:
            found = counts.get(name, {})
            self.queue_depth.labels(name).set(found.get("pending", 0) + found.get("delivering", 0))
            self.dead.labels(name).set(found.get("dead", 0))

    def disabled_set(self, disabled: set[str]) -> None:
        for name in self.receivers:
            self.disabled.labels(name).set(1 if name in disabled else 0)
