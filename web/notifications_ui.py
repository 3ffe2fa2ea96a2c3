"""The notifications page (dead letters by default, or every notification) and the Retry button's form post.

The same Retry form sits on a violation's page; `return_to` says where to go back (a fixed choice, never a
URL the client gives, so the form cannot be made into an open redirect).
"""

from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from gpuslo.engine.store.outbox_models import NOTIFICATION_STATUSES
from gpuslo.web.context import current_core
from gpuslo.web.filters import ALL, notification_filter
from gpuslo.web.incident_input import action_input, request_values
from gpuslo.web.notification_display import scrubbed

notifications_ui = Blueprint("notifications_ui", __name__)
notifications_ui.add_app_template_filter(scrubbed, "scrubbed")
DEFAULT_STATUS = "dead"


@notifications_ui.get("/notifications")
def notifications_page() -> str:
    filters, paging = notification_filter(request.args, current_core().settings.page_size, DEFAULT_STATUS)
    service = current_core().notifications
    page = service.page(filters, page=paging.page, page_size=paging.page_size)
    return render_template("notifications.html", page=page, filters=filters, receivers=service.receiver_names(),
                           statuses=(*NOTIFICATION_STATUSES, ALL), status=filters.status or ALL,
                           health=service.receiver_health())


@notifications_ui.post("/notifications/receivers/<name>/enable")
def enable_receiver(name: str) -> Response:
    given = action_input()
    current_core().notifications.enable_receiver(name, actor=given.actor, source=given.source)
    return redirect(url_for("notifications_ui.notifications_page", _anchor="receiver-health"), code=303)


@notifications_ui.post("/notifications/<int:notification_id>/retry")
def retry_notification(notification_id: int) -> Response:
    given = action_input()
    view = current_core().notifications.retry(notification_id, actor=given.actor, source=given.source)
    # 303: the browser follows with a GET, so a reload does not post the form again.
    if request_values().get("return_to") == "violation":
        return redirect(url_for("ui.violation", violation_id=view.violation_id, _anchor="notifications"), code=303)
    return redirect(url_for("notifications_ui.notifications_page"), code=303)
