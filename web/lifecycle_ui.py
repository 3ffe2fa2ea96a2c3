"""Pages and form posts of the incident lifecycle: buttons on a violation, comments, and the silences page.

Plain HTML forms that POST and redirect back (no JavaScript). Every form carries the session's CSRF token,
checked before the view runs (gpuslo.web.access).
"""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from gpuslo.engine.store.silences import MATCHER_FIELDS
from gpuslo.web.context import current_core
from gpuslo.web.incident_input import action_input, silence_input

lifecycle_ui = Blueprint("lifecycle_ui", __name__)


def _back_to(violation_id: int) -> Response:
    # 303: the browser follows with a GET, so a reload does not post the form again.
    return redirect(url_for("ui.violation", violation_id=violation_id), code=303)


@lifecycle_ui.post("/violations/<int:violation_id>/<any(acknowledge, resolve, reopen):action>")
def change_status(violation_id: int, action: str) -> Response:
    given = action_input()
    change = getattr(current_core().lifecycle, action)
    change(violation_id, actor=given.actor, comment=given.comment, source=given.source)
    return _back_to(violation_id)


@lifecycle_ui.post("/violations/<int:violation_id>/comments")
def add_comment(violation_id: int) -> Response:
    given = action_input(comment_required=True)
    current_core().lifecycle.comment(violation_id, actor=given.actor, comment=given.comment or "",
                                     source=given.source)
    return _back_to(violation_id)


@lifecycle_ui.get("/silences")
def silences_page() -> str:
    found = current_core().lifecycle.silences()
    return render_template("silences.html", silences=found, now=datetime.now(UTC), fields=MATCHER_FIELDS)


@lifecycle_ui.post("/silences")
def create_silence() -> Response:
    given = silence_input()
    current_core().lifecycle.create_silence(matchers=given.matchers, starts_at=given.starts_at,
                                            ends_at=given.ends_at, author=given.author, comment=given.comment,
                                            source=request.remote_addr)
    return redirect(url_for("lifecycle_ui.silences_page"), code=303)


@lifecycle_ui.post("/silences/<int:silence_id>/expire")
def expire_silence(silence_id: int) -> Response:
    given = action_input()
    current_core().lifecycle.expire_silence(silence_id, actor=given.actor, source=given.source)
    return redirect(url_for("lifecycle_ui.silences_page"), code=303)


@lifecycle_ui.app_template_filter("duration")
def duration(seconds: float | None) -> str:
    """Seconds as the rulebooks write them: `10m`, `4h`, `90s`."""
    if seconds is None:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
