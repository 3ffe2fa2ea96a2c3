"""The notifications API under /api/v1: a violation's notifications, the outbox filtered, and the retry of a
dead letter. Errors: NotFoundError 404, InvalidTransition 409 (gpuslo.web.errors)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Blueprint, Response, jsonify, request

from gpuslo.engine.events import format_time
from gpuslo.engine.store.notifications import NotificationDetail
from gpuslo.engine.store.receivers import ReceiverHealth
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.filters import notification_filter
from gpuslo.web.incident_input import action_input
from gpuslo.web.notification_display import details_json, scrubbed

notifications_api = Blueprint("notifications_api", __name__, url_prefix="/api/v1")


@notifications_api.get("/violations/<int:violation_id>/notifications")
def violation_notifications(violation_id: int) -> Response:
    """Every notification of a violation, oldest first, each with its delivery attempts."""
    found = current_core().notifications.of_violation(violation_id)
    if found is None:
        raise RequestError(404, "not_found", f"No violation with id {violation_id}.")
    return jsonify({"items": details_json(found)})


@notifications_api.get("/notifications")
def list_notifications() -> Response:
    """A page of notifications, newest first; `status` and `receiver` filter (every status by default)."""
    filters, paging = notification_filter(request.args, current_core().settings.page_size)
    page = current_core().notifications.page(filters, page=paging.page, page_size=paging.page_size)
    return jsonify({"items": details_json(page.items), "page": page.page, "page_size": page.page_size,
                    "total": page.total, "has_next": page.has_next})


@notifications_api.post("/notifications/<int:notification_id>/retry")
def retry_notification(notification_id: int) -> Response:
    """Send a dead notification again; the answer is the notification, now pending (its attempts so far too)."""
    given = action_input()
    service = current_core().notifications
    view = service.retry(notification_id, actor=given.actor, source=given.source)
    detail = service.detail(view.id)
    return jsonify(details_json([detail or NotificationDetail(view, ())])[0])


def _health_json(found: ReceiverHealth) -> dict[str, Any]:
    data = found.to_dict()
    data["last_error"] = scrubbed(found.last_error) or None
    return {k: format_time(v) if isinstance(v, datetime) else v for k, v in data.items()}


@notifications_api.get("/receivers")
def list_receivers() -> Response:
    """Health of every receiver: last success and failure, disabled (410 Gone) or not, and its queue."""
    return jsonify({"items": [_health_json(h) for h in current_core().notifications.receiver_health()]})


@notifications_api.post("/receivers/<name>/enable")
def enable_receiver(name: str) -> Response:
    """Re-enable a receiver that a 410 Gone disabled; its waiting notifications go out again (audited)."""
    given = action_input()
    enabled = current_core().notifications.enable_receiver(name, actor=given.actor, source=given.source)
    return jsonify(_health_json(enabled))
