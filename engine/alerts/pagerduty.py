"""PagerDuty Events API v2: trigger, acknowledge and resolve one incident per violation (the dedup key)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from gpuslo.engine.alerts.notification import ACTIONS, HttpRequest, Notification, Receiver, truncate
from gpuslo.engine.alerts.receiver_config import ConfigProblems, ReceiverType, Target
from gpuslo.engine.alerts.secrets import Secret
from gpuslo.engine.rulebook.marked_yaml import Path_

DEFAULT_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_LIMIT = 1024  # PagerDuty refuses longer summaries
SEVERITY = {"critical": "critical", "error": "error", "warning": "warning", "info": "info"}


@dataclass(frozen=True)
class PagerDutyReceiver:
    """Sends to one PagerDuty service through its Events API v2 integration key (`routing_key`)."""

    name: str
    routing_key: Secret
    url: str = DEFAULT_URL
    kind: ClassVar[str] = "pagerduty"
    actions: ClassVar[frozenset[str]] = frozenset(ACTIONS)

    def render(self, notification: Notification, message_id: str, now: datetime) -> HttpRequest:
        body: dict[str, object] = {
            "routing_key": self.routing_key.value,
            "event_action": notification.action,
            "dedup_key": notification.dedup_key,
        }
        if notification.action == "trigger":
            body.update(_trigger_fields(notification, now))
        return HttpRequest(
            "POST", self.url, {"Content-Type": "application/json"},
            json.dumps(body, separators=(",", ":"), sort_keys=True).encode(), (self.routing_key.value,),
        )


def _trigger_fields(n: Notification, now: datetime) -> dict[str, object]:
    details = {"rule": n.rule, "rule_title": n.rule_title, "slo": n.slo, "occurrences": n.occurrences,
               "first_seen": n.first_seen, "last_seen": n.last_seen, "labels": dict(n.labels),
               "group": dict(n.group), "violation": n.url}
    if n.runbook:
        details["runbook"] = n.runbook
    payload: dict[str, object] = {
        "summary": truncate(n.summary or n.rule_title, SUMMARY_LIMIT),
        "source": n.host or "gpuslo",
        "severity": SEVERITY.get(n.severity, "error"),
        "timestamp": n.last_seen or now.isoformat(),
        "group": n.slo,
        "class": n.rule,
        "custom_details": details,
    }
    if n.gpu is not None:
        payload["component"] = f"gpu{n.gpu}"
    links = [{"href": n.url, "text": "Why it fired (gpuslo)"}]
    if n.runbook:
        links.append({"href": n.runbook, "text": "Runbook"})
    return {"payload": payload, "links": links, "client": "gpuslo", "client_url": n.url}


def parse_config(problems: ConfigProblems, item: dict[str, Any], path: Path_, target: Target) -> Receiver | None:
    """`routing_key` (a secret reference) and an optional `url` (the Events API endpoint)."""
    key = problems.secret(item.get("routing_key"), (*path, "routing_key"))
    url = problems.url(item.get("url", DEFAULT_URL), (*path, "url"), target, secret_allowed=False)
    return PagerDutyReceiver(target[0], key, str(url)) if key and url else None


RECEIVER_TYPE = ReceiverType("pagerduty", frozenset({"routing_key", "url"}), parse_config)
