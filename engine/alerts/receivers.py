"""The receiver types alerts.yaml may name: ONE table. Adding a receiver is its module (render + parse_config +
RECEIVER_TYPE) and one line here; docs/alerts.md must list it (a test checks)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from gpuslo.engine.alerts import alertmanager, opsgenie, pagerduty, slack, webhook
from gpuslo.engine.alerts.receiver_config import ReceiverType

RECEIVER_TYPES: Mapping[str, ReceiverType] = MappingProxyType({t.name: t for t in (
    pagerduty.RECEIVER_TYPE,
    slack.RECEIVER_TYPE,
    opsgenie.RECEIVER_TYPE,
    webhook.RECEIVER_TYPE,
    alertmanager.RECEIVER_TYPE,
)})
