"""How notifications and their attempts are shown (pages and JSON), with a last scrub of secrets.

The delivery worker stores errors with every configured secret value replaced by ***; this is the second lock on
the door. A receiver may echo only the path of a secret URL (a Slack webhook's token is in its path), which the
worker's whole-value redaction misses, so the parts of secret URLs are hidden too; and every URL is cut down to
its scheme and host, because its path or query may carry a credential gpuslo does not know is one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuslo.engine.alerts.secrets import scrub
from gpuslo.engine.store.notifications import NotificationDetail
from gpuslo.web.context import current_core
from gpuslo.web.serialize import to_json

# Fields of a notification in the API; the payload stays out (it is what receivers got, served by no route).
FIELDS = ("id", "violation_id", "receiver", "action", "dedup_key", "status", "suppressed_reason", "attempts",
          "next_attempt_at", "lease_until", "created_at", "delivered_at")


def _configured_secrets() -> tuple[str, ...]:
    alerts = getattr(current_core(), "alerts", None)
    return alerts.secret_values() if alerts is not None else ()


def detail_json(detail: NotificationDetail, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """A notification's fields plus `delivery_attempts` (oldest first), errors scrubbed."""
    secrets = tuple(secrets)
    body = {name: to_json(getattr(detail.notification, name)) for name in FIELDS}
    body["delivery_attempts"] = [{**to_json(a), "error": scrub(a.error, secrets)} for a in detail.attempts]
    return body


def details_json(details: Iterable[NotificationDetail]) -> list[dict[str, Any]]:
    secrets = _configured_secrets()
    return [detail_json(d, secrets) for d in details]


def scrubbed(text: str | None) -> str:
    """The `scrubbed` template filter: an attempt's error as it may be shown."""
    return scrub(text, _configured_secrets()) or ""
