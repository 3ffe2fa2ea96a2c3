"""Server-rendered pages for on-call engineers: violations, one violation's explanation, rulebooks, events."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode, urlsplit

from flask import Blueprint, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from gpuslo.engine.events import KINDS
from gpuslo.engine.rulebook.model import SEVERITIES
from gpuslo.engine.violations import STATUSES
from gpuslo.web.chart_data import evidence_timeline, severity_over_time, stall_attribution
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.filters import event_filter, violation_filter
from gpuslo.web.trace_links import trace_url

ui = Blueprint("ui", __name__)


@ui.app_template_global("trace_link")
def trace_link(trace_id: str | None, span_id: str | None = None) -> str | None:
    """The configured trace UI's URL of an event's trace, or None."""
    return trace_url(current_core().settings.trace_url_template, trace_id, span_id)


@ui.app_template_filter("short_hash")
def short_hash(content_hash: str | None) -> str:
    return (content_hash or "")[:12]


@ui.app_template_filter("link_url")
def link_url(url: str | None) -> str | None:
    """The URL when it is http(s) with a host, else None: anything else is shown as text, never a link."""
    if not url:
        return None
    parts = urlsplit(url.strip())
    return url.strip() if parts.scheme in ("http", "https") and parts.netloc else None


@ui.app_template_filter("observed")
def observed(value: Any) -> str:
    """An observed value as the rule language would write it (`0.71`, `"cuMemAlloc"`, `null`)."""
    return json.dumps(value, default=str)


@ui.app_template_global()
def page_url(page: int) -> str:
    """The current page's URL with only `page` changed; the filters stay."""
    args = [(k, v) for k, v in request.args.items(multi=True) if k != "page" and v.strip()]
    return request.path + "?" + urlencode([*args, ("page", str(page))])


@ui.app_template_global()
def choices() -> dict[str, tuple[str, ...]]:
    return {"status": STATUSES, "severity": SEVERITIES, "kind": KINDS}


@ui.get("/")
def index() -> Response:
    return redirect(url_for("ui.violations"))


@ui.get("/violations")
def violations() -> str:
    filters, paging = violation_filter(request.args, current_core().settings.page_size)
    queries = current_core().queries
    page = queries.violations(filters, page=paging.page, page_size=paging.page_size)
    (marks,) = queries.violation_marks(filters)
    over_time = severity_over_time(marks, SEVERITIES)
    return render_template("violations.html", page=page, args=request.args, over_time=over_time,
                           charts_on_page=bool(marks))


@ui.get("/violations/<int:violation_id>")
def violation(violation_id: int) -> str:
    core = current_core()
    detail = core.queries.violation(violation_id)
    if detail is None:
        raise RequestError(404, "not_found", f"No violation with id {violation_id}.")
    sent = core.notifications.of_violation(violation_id)
    return render_template("violation.html", v=detail, explanation=detail.explanation or {},
                           notifications=sent or (), costs=core.slos.violation_costs(violation_id),
                           timeline=evidence_timeline(detail.evidence),
                           stall_chart=stall_attribution(detail.evidence),
                           charts_on_page=bool(detail.evidence))


@ui.get("/rulebooks")
def rulebooks() -> str:
    rulebooks = current_core().rulebooks
    return render_template("rulebooks.html", status=rulebooks.status(), versions=rulebooks.versions())


@ui.get("/events")
def events() -> str:
    filters, paging = event_filter(request.args, current_core().settings.page_size)
    page = current_core().queries.events(filters, page=paging.page, page_size=paging.page_size)
    return render_template("events.html", page=page, args=request.args)


