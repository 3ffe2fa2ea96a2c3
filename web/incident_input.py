"""Reading lifecycle actions and silences from a request (JSON body or HTML form), with a precise 400."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import request

from gpuslo.engine.store.silences import LABEL_PREFIX, MATCHER_FIELDS
from gpuslo.engine.units import parse_duration
from gpuslo.web.access import current_actor
from gpuslo.web.errors import RequestError
from gpuslo.web.filters import parse_time

ANONYMOUS = "anonymous"
MAX_ACTOR = 200
MAX_COMMENT = 10_000
MAX_SILENCE_S = 90 * 86400.0


@dataclass(frozen=True)
class ActionInput:
    """Who acts, from where, and why: the logged-in user or token, else the name the body gives."""

    actor: str
    comment: str | None
    source: str | None


@dataclass(frozen=True)
class SilenceInput:
    matchers: dict[str, object]
    starts_at: datetime
    ends_at: datetime
    author: str
    comment: str


def _bad(field: str, reason: str) -> RequestError:
    return RequestError(400, "bad_request", f"{field}: {reason}", [{"field": field, "reason": reason}])


def request_values() -> Mapping[str, Any]:
    """The JSON object body (API) or the form fields (UI); an empty body is an empty mapping."""
    if request.mimetype == "application/json":
        body = request.get_json(silent=True)
        if body is None and request.get_data():
            raise _bad("(body)", "not valid JSON")
        if body is None:
            return {}
        if not isinstance(body, dict):
            raise _bad("(body)", "must be a JSON object")
        return body
    if request.form:
        return request.form
    if request.get_data():
        raise RequestError(415, "unsupported_media_type", "send application/json or an HTML form")
    return {}


def _text(values: Mapping[str, Any], field: str, limit: int) -> str | None:
    value = values.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(field, "must be text")
    if len(value) > limit:
        raise _bad(field, f"longer than {limit} characters")
    return value.strip() or None


def action_input(*, comment_required: bool = False) -> ActionInput:
    values = request_values()
    comment = _text(values, "comment", MAX_COMMENT)
    if comment_required and comment is None:
        raise _bad("comment", "is required and may not be empty")
    # Logged in or with a token: that name, never one the body claims. Bootstrap/open mode: the body's name.
    actor = current_actor() or _text(values, "actor", MAX_ACTOR) or ANONYMOUS
    return ActionInput(actor, comment, request.remote_addr)


def _matchers(values: Mapping[str, Any]) -> dict[str, object]:
    """JSON: `matchers` object. Form: one field per matcher (`severity`, `host`, ...), `labels` as k=v lines."""
    if "matchers" in values:
        matchers = values["matchers"]
        if not isinstance(matchers, dict):
            raise _bad("matchers", "must be an object of field → value")
        return dict(matchers)
    found: dict[str, object] = {name: values[name].strip() for name in MATCHER_FIELDS
                                if isinstance(values.get(name), str) and values[name].strip()}
    for line in str(values.get("labels") or "").splitlines():
        if line.strip():
            name, equals, value = line.partition("=")
            if not equals:
                raise _bad("labels", f"{line.strip()[:40]!r} is not name=value")
            found[LABEL_PREFIX + name.strip()] = value.strip()
    return found


def _moment(values: Mapping[str, Any], field: str) -> datetime | None:
    text = _text(values, field, 64)
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise _bad(field, str(exc)) from None


def silence_input(now: datetime | None = None) -> SilenceInput:
    """`matchers`, `starts_at` (default now), `ends_at` or `duration` (`2h`), `author` (or `actor`), `comment`."""
    values = request_values()
    starts_at = _moment(values, "starts_at") or now or datetime.now(UTC)
    ends_at = _moment(values, "ends_at")
    duration = _text(values, "duration", 32)
    if ends_at is None and duration is None:
        raise _bad("ends_at", "give ends_at or a duration such as 2h")
    if ends_at is None:
        try:
            seconds = parse_duration(duration)
        except ValueError as exc:
            raise _bad("duration", str(exc)) from None
        if not 0 < seconds <= MAX_SILENCE_S:
            raise _bad("duration", f"must be above 0 and at most {MAX_SILENCE_S / 86400:.0f} days")
        ends_at = starts_at + timedelta(seconds=seconds)
    author = (current_actor() or _text(values, "author", MAX_ACTOR) or _text(values, "actor", MAX_ACTOR)
              or ANONYMOUS)
    comment = _text(values, "comment", MAX_COMMENT)
    if comment is None:
        raise _bad("comment", "say why the silence is needed")
    return SilenceInput(_matchers(values), starts_at, ends_at, author, comment)
