"""Generic webhooks signed per the Standard Webhooks spec, with an optional Alertmanager-compatible body."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

from gpuslo.engine.alerts.notification import ACTIONS, HttpRequest, Notification, Receiver
from gpuslo.engine.alerts.receiver_config import ConfigProblems, ReceiverType, Target
from gpuslo.engine.alerts.secrets import Secret
from gpuslo.engine.rulebook.marked_yaml import Path_

FORMATS = ("standard", "alertmanager")
SECRET_PREFIX = "whsec_"
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "not ended"


def signing_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: base64 after the `whsec_` prefix. ValueError if malformed."""
    try:
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError as exc:
        raise ValueError("a webhook secret must be 'whsec_' followed by base64") from exc


def sign(secrets: tuple[str, ...], message_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256>` of `{id}.{timestamp}.{body}` per secret, space-separated (key rotation)."""
    content = f"{message_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(signing_key(s), content, hashlib.sha256).digest()).decode()
        for s in secrets
    )


@dataclass(frozen=True)
class WebhookReceiver:
    """POSTs JSON to `url`, signed with every secret in `secrets` (new first, then old, while rotating)."""

    name: str
    url: str | Secret
    secrets: tuple[Secret, ...] = ()
    format: str = "standard"
    kind: ClassVar[str] = "webhook"

    @property
    def actions(self) -> frozenset[str]:
        # Alertmanager payloads know firing and resolved only; an acknowledgement would read as a new firing.
        return frozenset({"trigger", "resolve"}) if self.format == "alertmanager" else frozenset(ACTIONS)

    def render(self, notification: Notification, message_id: str, now: datetime) -> HttpRequest:
        if self.format == "alertmanager":
            document = alertmanager_body(notification, self.name, now)
        else:
            document = {"type": f"violation.{notification.action}", "timestamp": now.isoformat(),
                        "data": notification.to_dict()}
        body = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
        timestamp = int(now.timestamp())
        headers = {"Content-Type": "application/json", "webhook-id": message_id,
                   "webhook-timestamp": str(timestamp)}
        values = tuple(s.value for s in self.secrets)
        if values:
            headers["webhook-signature"] = sign(values, message_id, timestamp, body)
        url = self.url.value if isinstance(self.url, Secret) else self.url
        hidden = values + ((url,) if isinstance(self.url, Secret) else ())
        return HttpRequest("POST", url, headers, body, hidden)


def fingerprint(dedup_key: str) -> str:
    return hashlib.sha256(dedup_key.encode()).hexdigest()[:16]


def group_key(rule: str) -> str:
    """Alertmanager's group key for alerts grouped by alertname: `{}:{alertname="<rule>"}`."""
    return "{}:{alertname=" + json.dumps(rule) + "}"


def alertmanager_body(n: Notification, receiver: str, now: datetime | None = None) -> dict[str, object]:
    """An Alertmanager webhook (version 4) document holding this one alert, in the group of its rule.

    A resolved alert ends when it was resolved (the time of sending), never at its start."""
    now = now or datetime.now(UTC)
    resolved = n.action == "resolve"
    labels = {**n.labels, "alertname": n.rule, "severity": n.severity, "slo": n.slo}
    if n.host:
        labels["host"] = n.host
    if n.gpu is not None:
        labels["gpu"] = str(n.gpu)
    annotations = {"summary": n.summary, "description": n.rule_title}
    if n.runbook:
        annotations["runbook_url"] = n.runbook
    status = "resolved" if resolved else "firing"
    alert = {
        "status": status, "labels": labels, "annotations": annotations,
        "startsAt": n.first_seen or now.isoformat().replace("+00:00", "Z"),
        "endsAt": now.isoformat().replace("+00:00", "Z") if resolved else ZERO_TIME,
        "generatorURL": n.url, "fingerprint": fingerprint(n.dedup_key),
    }
    return {
        "version": "4", "groupKey": group_key(n.rule), "truncatedAlerts": 0, "status": status, "receiver": receiver,
        "groupLabels": {"alertname": n.rule}, "commonLabels": labels, "commonAnnotations": annotations,
        "externalURL": n.url.rsplit("/violations/", 1)[0], "alerts": [alert],
    }


def parse_config(problems: ConfigProblems, item: dict[str, Any], path: Path_, target: Target) -> Receiver | None:
    """`url` (plain or a secret reference), `secret` (one or two `whsec_` references, new first) and `format`."""
    url = problems.url(item.get("url"), (*path, "url"), target, secret_allowed=True)
    refs = item.get("secret", [])
    refs = [refs] if isinstance(refs, str) else refs
    secrets = []
    for i, ref in enumerate(problems.as_list(refs, (*path, "secret"))):
        where = (*path, "secret", i) if isinstance(item.get("secret"), list) else (*path, "secret")
        found = problems.secret(ref, where)
        if found is not None:
            try:
                signing_key(found.value)
            except ValueError as exc:
                problems.add(where, f"{found.ref}: {exc}")
                continue
            secrets.append(found)
    if len(secrets) > 2:
        problems.add((*path, "secret"), "at most two secrets: the new one and the one being rotated out")
    fmt = item.get("format", "standard")
    if fmt not in FORMATS:
        problems.add((*path, "format"), f"format must be one of {', '.join(FORMATS)}")
        return None
    return WebhookReceiver(target[0], url, tuple(secrets), fmt) if url else None


RECEIVER_TYPE = ReceiverType("webhook", frozenset({"url", "secret", "format"}), parse_config)
