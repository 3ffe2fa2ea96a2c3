"""Payload shapes of each receiver, and Standard Webhooks signatures checked by an independent verifier."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from gpuslo.engine.alerts.notification import Notification
from gpuslo.engine.alerts.opsgenie import OpsgenieReceiver
from gpuslo.engine.alerts.pagerduty import PagerDutyReceiver
from gpuslo.engine.alerts.secrets import Secret
from gpuslo.engine.alerts.slack import SlackReceiver
from gpuslo.engine.alerts.webhook import WebhookReceiver

NOW = datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
NEW_SECRET = "whsec_" + base64.b64encode(b"new-signing-key-32-bytes-long!!!").decode()
OLD_SECRET = "whsec_" + base64.b64encode(b"old-signing-key").decode()


def notification(action: str = "trigger", **changes: object) -> Notification:
    fields: dict[str, object] = {
        "dedup_key": "gpuslo-42", "action": action, "severity": "critical", "summary": "3 OOMs on node-a GPU 0",
        "url": "https://gpuslo.example/violations/42", "rule": "oom-storm", "rule_title": "OOM storm",
        "slo": "availability", "violation_id": 42, "host": "node-a", "gpu": 0, "labels": {"team": "serving"},
        "group": {"host": "node-a", "gpu": 0}, "first_seen": "2026-03-01T11:59:00Z",
        "last_seen": "2026-03-01T12:00:00Z", "occurrences": 3, "runbook": "https://runbooks.example/oom",
    }
    fields.update(changes)
    return Notification(**fields)  # type: ignore[arg-type]


def test_pagerduty_trigger_has_routing_key_dedup_key_severity_links_and_details() -> None:
    receiver = PagerDutyReceiver("pd", Secret("env:PD", "R" * 32), "http://127.0.0.1:1/v2/enqueue")
    request = receiver.render(notification(), "msg_1", NOW)
    body = json.loads(request.body)
    assert body["routing_key"] == "R" * 32 and body["event_action"] == "trigger"
    assert body["dedup_key"] == "gpuslo-42"
    payload = body["payload"]
    assert (payload["summary"], payload["source"], payload["severity"]) == ("3 OOMs on node-a GPU 0", "node-a",
                                                                           "critical")
    assert payload["component"] == "gpu0" and payload["class"] == "oom-storm" and payload["group"] == "availability"
    assert payload["custom_details"]["violation"] == "https://gpuslo.example/violations/42"
    assert body["links"][0]["href"] == "https://gpuslo.example/violations/42"
    assert request.secrets == ("R" * 32,)


@pytest.mark.parametrize("severity", ["critical", "error", "warning", "info"])
def test_pagerduty_severity_mapping_and_summary_limit(severity: str) -> None:
    receiver = PagerDutyReceiver("pd", Secret("env:PD", "k"))
    body = json.loads(receiver.render(notification(severity=severity, summary="s" * 5000), "m", NOW).body)
    assert body["payload"]["severity"] == severity
    assert len(body["payload"]["summary"]) == 1024 and body["payload"]["summary"].endswith("…")


@pytest.mark.parametrize("action", ["acknowledge", "resolve"])
def test_pagerduty_acknowledge_and_resolve_carry_only_the_key(action: str) -> None:
    body = json.loads(PagerDutyReceiver("pd", Secret("env:PD", "k")).render(notification(action), "m", NOW).body)
    assert body == {"routing_key": "k", "event_action": action, "dedup_key": "gpuslo-42"}


def test_slack_blocks_have_header_fields_summary_and_button() -> None:
    receiver = SlackReceiver("slack", Secret("env:SLACK", "http://127.0.0.1:1/services/T/B/secret"))
    request = receiver.render(notification(summary="<!channel> & <https://evil|click>"), "m", NOW)
    body = json.loads(request.body)
    header, fields, summary, actions = body["blocks"]
    assert header["type"] == "header" and "OOM storm" in header["text"]["text"]
    assert [f["text"].split("\n")[0] for f in fields["fields"]] == ["*Severity*", "*SLO*", "*Rule*", "*Where*"]
    assert "node-a GPU 0" in fields["fields"][3]["text"]
    assert summary["text"]["text"] == "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;"
    assert actions["elements"][0]["url"] == "https://gpuslo.example/violations/42"
    assert body["text"].startswith("[Firing] CRITICAL OOM storm")
    assert request.url.endswith("/services/T/B/secret") and request.secrets == (request.url,)


def test_opsgenie_create_uses_alias_priority_and_geniekey() -> None:
    receiver = OpsgenieReceiver("og", Secret("env:OG", "genie-123"), "http://127.0.0.1:1")
    request = receiver.render(notification(severity="warning"), "m", NOW)
    body = json.loads(request.body)
    assert request.url == "http://127.0.0.1:1/v2/alerts"
    assert request.headers["Authorization"] == "GenieKey genie-123"
    assert body["alias"] == "gpuslo-42" and body["priority"] == "P3" and body["entity"] == "node-a"
    assert len(body["message"]) <= 130 and "https://gpuslo.example/violations/42" in body["description"]
    assert json.loads(receiver.render(notification(severity="critical"), "m", NOW).body)["priority"] == "P1"
    assert json.loads(receiver.render(notification(test=True), "m", NOW).body)["priority"] == "P5"


def test_opsgenie_resolve_closes_by_alias_and_acknowledge_acknowledges() -> None:
    receiver = OpsgenieReceiver("og", Secret("env:OG", "genie-123"), "http://127.0.0.1:1")
    close = receiver.render(notification("resolve"), "m", NOW)
    assert close.url == "http://127.0.0.1:1/v2/alerts/gpuslo-42/close?identifierType=alias"
    ack = receiver.render(notification("acknowledge"), "m", NOW)
    assert ack.url == "http://127.0.0.1:1/v2/alerts/gpuslo-42/acknowledge?identifierType=alias"
    assert json.loads(close.body)["source"] == "gpuslo"


def test_webhook_signature_verifies_independently_and_changes_with_the_body(verify_standard_webhook) -> None:
    receiver = WebhookReceiver("hook", "http://127.0.0.1:1/hook", (Secret("env:HOOK", NEW_SECRET),))
    request = receiver.render(notification(), "msg_gpuslo_7", NOW)
    headers = dict(request.headers)
    assert headers["webhook-id"] == "msg_gpuslo_7" and headers["webhook-timestamp"] == str(int(NOW.timestamp()))
    assert verify_standard_webhook([NEW_SECRET], headers, request.body)
    assert not verify_standard_webhook([NEW_SECRET], headers, request.body + b" ")
    assert not verify_standard_webhook([OLD_SECRET], headers, request.body)
    body = json.loads(request.body)
    assert body["type"] == "violation.trigger" and body["data"]["dedup_key"] == "gpuslo-42"


def test_webhook_signs_with_two_secrets_during_rotation(verify_standard_webhook) -> None:
    receiver = WebhookReceiver("hook", "http://127.0.0.1:1/hook",
                               (Secret("env:NEW", NEW_SECRET), Secret("env:OLD", OLD_SECRET)))
    request = receiver.render(notification(), "msg_gpuslo_7", NOW)
    signatures = request.headers["webhook-signature"].split(" ")
    assert len(signatures) == 2 and all(s.startswith("v1,") for s in signatures)
    assert verify_standard_webhook([OLD_SECRET], dict(request.headers), request.body)  # not yet rotated consumer
    assert verify_standard_webhook([NEW_SECRET], dict(request.headers), request.body)  # rotated consumer


def test_webhook_alertmanager_format() -> None:
    receiver = WebhookReceiver("am", "http://127.0.0.1:1/am", (), "alertmanager")
    firing = json.loads(receiver.render(notification(), "m", NOW).body)
    assert firing["version"] == "4" and firing["status"] == "firing"
    assert firing["groupKey"] == '{}:{alertname="oom-storm"}'  # Alertmanager's group key: grouped by rule
    (alert,) = firing["alerts"]
    assert alert["labels"] == {"alertname": "oom-storm", "severity": "critical", "slo": "availability",
                               "host": "node-a", "gpu": "0", "team": "serving"}
    assert alert["annotations"]["summary"] == "3 OOMs on node-a GPU 0"
    assert alert["endsAt"] == "0001-01-01T00:00:00Z" and alert["startsAt"] == "2026-03-01T11:59:00Z"
    resolved = json.loads(receiver.render(notification("resolve"), "m", NOW).body)
    assert resolved["status"] == "resolved" and resolved["alerts"][0]["endsAt"] == "2026-03-01T12:00:05Z"
    assert resolved["alerts"][0]["fingerprint"] == alert["fingerprint"]
    assert "acknowledge" not in receiver.actions
