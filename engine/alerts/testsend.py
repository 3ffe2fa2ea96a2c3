"""`gpuslo alerts test`: send a test notification through a route and show what each receiver got."""

from __future__ import annotations

import json
import logging
import secrets as random_tokens
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuslo.engine.alerts.delivery import SecretScrubber
from gpuslo.engine.alerts.egress import GuardedClients, Resolver, system_resolver
from gpuslo.engine.alerts.notification import Notification, violation_url
from gpuslo.engine.alerts.routing import AlertsConfig, route
from gpuslo.engine.alerts.secrets import REDACTED, redact
from gpuslo.engine.alerts.transport import send
from gpuslo.engine.errors import ConfigError

SECRET_HEADERS = ("authorization", "webhook-signature")


@dataclass(frozen=True)
class AlertTestResult:
    """What one receiver was sent and answered; secrets are replaced by *** everywhere."""

    receiver: str
    kind: str
    action: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: str
    status: str
    response_code: int | None
    response_body: str | None
    error: str | None
    latency_ms: int

    def describe(self) -> str:
        code = self.response_code if self.response_code is not None else "-"
        text = f"{self.receiver} ({self.kind}) {self.action}: {self.status} HTTP {code} in {self.latency_ms} ms"
        return text + (f" — {self.error}" if self.error else "")


def make_test_notification(config: AlertsConfig, route_name: str | None, public_url: str) -> Notification:
    """A trigger that the named route (or the first route) matches, marked as a test."""
    routes = [r for r in config.routes if route_name is None or r.name == route_name]
    if not routes:
        known = ", ".join(r.name for r in config.routes) or "none"
        raise ConfigError(f"{config.source}: no route named {route_name!r} (routes: {known})")
    fields = {name: sorted(values)[0] for name, values in routes[0].matcher.fields.items()}
    labels = {name: sorted(values)[0] for name, values in routes[0].matcher.labels.items()}
    return Notification(
        dedup_key=f"gpuslo-test-{random_tokens.token_hex(6)}", action="trigger",
        severity=fields.get("severity", "info"), summary="Test notification from gpuslo: nothing is wrong.",
        url=violation_url(public_url, 0), rule=fields.get("rule", "gpuslo-test"), rule_title="gpuslo test",
        slo=fields.get("slo", "test"), violation_id=0, host=fields.get("host"),
        gpu=int(fields["gpu"]) if "gpu" in fields else None, labels=labels, test=True)


def send_test(config: AlertsConfig, *, route_name: str | None = None, public_url: str,
              resolve: bool = True, timeout_s: float = 10.0,
              resolver: Resolver = system_resolver) -> list[AlertTestResult]:
    """Send a test trigger (then its resolve, where supported) to every receiver the route selects, through
    the same address checks as delivery (egress)."""
    notification = make_test_notification(config, route_name, public_url)
    results = []
    scrubber = SecretScrubber(config.secret_values())
    logging.getLogger("httpx").addFilter(scrubber)
    try:
        clients = GuardedClients(timeout_s, resolver)
        try:
            results = _send_all(config, notification, resolve, clients)
        finally:
            clients.close()
    finally:
        logging.getLogger("httpx").removeFilter(scrubber)
    return results


def _send_all(config: AlertsConfig, notification: Notification, resolve: bool,
              clients: GuardedClients) -> list[AlertTestResult]:
    results = []
    for target in route(config, {**notification.match_fields(), "violation_id": 0}):
        receiver = config.receivers[target.receiver]
        client = clients.get(config.target_policy(target.receiver))
        actions = ["trigger"] + (["resolve"] if resolve and "resolve" in receiver.actions else [])
        for number, action in enumerate(actions):
            message = Notification.from_dict({**notification.to_dict(), "action": action})
            now = datetime.now(UTC)
            request = receiver.render(message, f"msg_gpuslo_test_{notification.dedup_key}_{number}", now)
            outcome = send(client, request, now, keep_body=True)
            hidden = request.secrets + config.secret_values()

            def clean(text: str, hidden: tuple[str, ...] = hidden) -> str:
                return redact(text, hidden)

            headers = tuple((k, REDACTED if k.lower() in SECRET_HEADERS else clean(v))
                            for k, v in request.headers.items())
            body = clean(json.dumps(json.loads(request.body), indent=2, sort_keys=True))
            results.append(AlertTestResult(
                target.receiver, receiver.kind, action, clean(request.url), headers, body, outcome.status,
                outcome.response_code, outcome.body, outcome.error, outcome.latency_ms))
    return results
