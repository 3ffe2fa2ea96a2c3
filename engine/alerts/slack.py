"""Slack incoming webhooks: a header, severity/SLO/rule fields, the summary and a button to the violation."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from gpuslo.engine.alerts.notification import ACTIONS, HttpRequest, Notification, Receiver, truncate
from gpuslo.engine.alerts.receiver_config import ConfigProblems, ReceiverType, Target
from gpuslo.engine.alerts.secrets import Secret, is_reference
from gpuslo.engine.rulebook.marked_yaml import Path_

HEADER_LIMIT = 150  # Slack's limit on a header block's text
TEXT_LIMIT = 3000  # and on a section's text
ICONS = {"trigger": ":rotating_light:", "acknowledge": ":eyes:", "resolve": ":white_check_mark:"}
VERBS = {"trigger": "Firing", "acknowledge": "Acknowledged", "resolve": "Resolved"}


def escape(text: str) -> str:
    """Slack mrkdwn treats &, < and > as control characters; escaping also stops injected links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class SlackReceiver:
    """Posts to a Slack incoming webhook; the webhook URL is itself the secret."""

    name: str
    url: Secret
    kind: ClassVar[str] = "slack"
    actions: ClassVar[frozenset[str]] = frozenset(ACTIONS)

    def render(self, notification: Notification, message_id: str, now: datetime) -> HttpRequest:
        body = {"text": fallback_text(notification), "blocks": blocks(notification)}
        return HttpRequest("POST", self.url.value, {"Content-Type": "application/json"},
                           json.dumps(body, separators=(",", ":")).encode(), (self.url.value,))


def fallback_text(n: Notification) -> str:
    """The plain text Slack shows in notifications and where blocks cannot render."""
    return truncate(f"[{VERBS[n.action]}] {n.severity.upper()} {n.rule_title}: {n.summary} {n.url}", TEXT_LIMIT)


def blocks(n: Notification) -> list[dict[str, object]]:
    place = n.host or "-"
    if n.gpu is not None:
        place += f" GPU {n.gpu}"
    fields = [("Severity", n.severity), ("SLO", n.slo), ("Rule", n.rule), ("Where", place)]
    return [
        {"type": "header", "text": {"type": "plain_text", "emoji": True,
                                    "text": truncate(f"{ICONS[n.action]} {VERBS[n.action]}: {n.rule_title}",
                                                     HEADER_LIMIT)}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{label}*\n{escape(value)}"}
                                       for label, value in fields]},
        {"type": "section", "text": {"type": "mrkdwn", "text": truncate(escape(n.summary), TEXT_LIMIT)}},
        {"type": "actions", "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Why it fired"},
                                          "url": n.url, "action_id": "open-violation"}]},
    ]


def parse_config(problems: ConfigProblems, item: dict[str, Any], path: Path_, target: Target) -> Receiver | None:
    """`url`: the incoming webhook URL, itself a secret, so only ever a reference."""
    if not (isinstance(item.get("url"), str) and is_reference(item["url"])):
        problems.add((*path, "url"), "a Slack webhook URL is a secret: write it as 'env:VAR' or 'file:/path'")
        return None
    url = problems.url(item["url"], (*path, "url"), target, secret_allowed=True)
    return SlackReceiver(target[0], url) if isinstance(url, Secret) else None


RECEIVER_TYPE = ReceiverType("slack", frozenset({"url"}), parse_config)
