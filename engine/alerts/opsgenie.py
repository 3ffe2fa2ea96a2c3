"""Opsgenie Alert API v2: create with alias = dedup key; acknowledge and close by alias."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import quote

from gpuslo.engine.alerts.notification import ACTIONS, HttpRequest, Notification, Receiver, truncate
from gpuslo.engine.alerts.receiver_config import ConfigProblems, ReceiverType, Target
from gpuslo.engine.alerts.secrets import Secret
from gpuslo.engine.rulebook.marked_yaml import Path_

DEFAULT_URL = "https://api.opsgenie.com"
PRIORITY = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P4"}
TEST_PRIORITY = "P5"
MESSAGE_LIMIT = 130  # Opsgenie's limits on message, alias and description
ALIAS_LIMIT = 512
DESCRIPTION_LIMIT = 15000


@dataclass(frozen=True)
class OpsgenieReceiver:
    """Sends to Opsgenie with an API integration key (`GenieKey` header); `url` is the API base (EU: api.eu...)."""

    name: str
    api_key: Secret
    url: str = DEFAULT_URL
    kind: ClassVar[str] = "opsgenie"
    actions: ClassVar[frozenset[str]] = frozenset(ACTIONS)

    def render(self, notification: Notification, message_id: str, now: datetime) -> HttpRequest:
        base = self.url.rstrip("/") + "/v2/alerts"
        alias = truncate(notification.dedup_key, ALIAS_LIMIT)
        note: dict[str, object] = {"source": "gpuslo", "user": "gpuslo",
                                   "note": f"{notification.action} from gpuslo: {notification.url}"}
        if notification.action == "trigger":
            url, body = base, _create(notification, alias)
        else:
            verb = "close" if notification.action == "resolve" else "acknowledge"
            url, body = f"{base}/{quote(alias, safe='')}/{verb}?identifierType=alias", note
        headers = {"Content-Type": "application/json", "Authorization": f"GenieKey {self.api_key.value}"}
        return HttpRequest("POST", url, headers, json.dumps(body, separators=(",", ":")).encode(),
                           (self.api_key.value,))


def _create(n: Notification, alias: str) -> dict[str, object]:
    details = {"rule": n.rule, "slo": n.slo, "severity": n.severity, "violation": n.url,
               "occurrences": str(n.occurrences), **{f"label.{k}": v for k, v in n.labels.items()}}
    if n.gpu is not None:
        details["gpu"] = str(n.gpu)
    return {
        "message": truncate(f"{n.rule_title}: {n.summary}", MESSAGE_LIMIT),
        "alias": alias,
        "description": truncate(f"{n.summary}\n\nWhy it fired: {n.url}", DESCRIPTION_LIMIT),
        "priority": TEST_PRIORITY if n.test else PRIORITY.get(n.severity, "P3"),
        "source": "gpuslo",
        "entity": n.host or "",
        "tags": sorted({"gpuslo", n.severity, n.slo}),
        "details": details,
    }


def parse_config(problems: ConfigProblems, item: dict[str, Any], path: Path_, target: Target) -> Receiver | None:
    """`api_key` (a secret reference) and an optional `url` (the API base; the EU instance has its own)."""
    key = problems.secret(item.get("api_key"), (*path, "api_key"))
    url = problems.url(item.get("url", DEFAULT_URL), (*path, "url"), target, secret_allowed=False)
    return OpsgenieReceiver(target[0], key, str(url)) if key and url else None


RECEIVER_TYPE = ReceiverType("opsgenie", frozenset({"api_key", "url"}), parse_config)
