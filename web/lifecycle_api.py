"""The lifecycle API under /api/v1: acknowledge, resolve, reopen and comment on violations; silences.

Thin: each view reads the request and calls one service function (gpuslo.engine.services.lifecycle).
InvalidTransition is a 409, NotFoundError a 404, InvalidSilence a 400 (gpuslo.web.errors). Authentication,
permissions and CSRF: gpuslo.web.access.
"""

from __future__ import annotations

from datetime import UTC, datetime

from flask import Blueprint, Response, jsonify, request

from gpuslo.engine.store.read_models import SilenceView
from gpuslo.web.context import current_core
from gpuslo.web.errors import RequestError
from gpuslo.web.incident_input import action_input, silence_input
from gpuslo.web.serialize import to_json

lifecycle_api = Blueprint("lifecycle_api", __name__, url_prefix="/api/v1")

ACTIONS = ("acknowledge", "resolve", "reopen")


@lifecycle_api.post("/violations/<int:violation_id>/<any(acknowledge, resolve, reopen):action>")
def change_status(violation_id: int, action: str) -> Response:
    """Acknowledge, resolve or reopen; the answer is the violation after the change."""
    given = action_input()
    change = getattr(current_core().lifecycle, action)
    view = change(violation_id, actor=given.actor, comment=given.comment, source=given.source)
    return jsonify(to_json(view))


@lifecycle_api.post("/violations/<int:violation_id>/comments")
def add_comment(violation_id: int) -> tuple[Response, int]:
    given = action_input(comment_required=True)
    view = current_core().lifecycle.comment(violation_id, actor=given.actor, comment=given.comment or "",
                                  source=given.source)
    return jsonify(to_json(view)), 201


def silence_json(silence: SilenceView, now: datetime) -> dict[str, object]:
    """A silence with whether it mutes anything now."""
    return {**to_json(silence), "active": silence.active_at(now)}


@lifecycle_api.get("/silences")
def list_silences() -> Response:
    include = request.args.get("include_expired", "true").strip().lower()
    if include not in ("true", "false"):
        raise RequestError(400, "bad_query", "include_expired must be true or false",
                           [{"param": "include_expired", "reason": "true or false"}])
    found = current_core().lifecycle.silences(include_expired=include == "true")
    now = datetime.now(UTC)
    return jsonify({"items": [silence_json(s, now) for s in found]})


@lifecycle_api.post("/silences")
def create_silence() -> tuple[Response, int]:
    given = silence_input()
    silence = current_core().lifecycle.create_silence(matchers=given.matchers, starts_at=given.starts_at,
                                                      ends_at=given.ends_at, author=given.author,
                                                      comment=given.comment, source=request.remote_addr)
    return jsonify(silence_json(silence, datetime.now(UTC))), 201


@lifecycle_api.post("/silences/<int:silence_id>/expire")
def expire_silence(silence_id: int) -> Response:
    given = action_input()
    silence = current_core().lifecycle.expire_silence(silence_id, actor=given.actor, source=given.source)
    return jsonify(silence_json(silence, datetime.now(UTC)))
