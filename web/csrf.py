"""CSRF protection: a per-session token in every form (or the X-CSRF-Token header), plus an origin check.

Bearer-token calls are exempt (a browser never adds the header by itself). JSON API calls in bootstrap/open
mode carry no session to protect; for them the origin check is the defence: browsers send Origin and
Sec-Fetch-Site on every cross-site POST, and a cross-site page cannot set a JSON content type without a CORS
preflight, which gpuslo never grants.
"""

from __future__ import annotations

import hmac
import secrets
from urllib.parse import urlsplit

from flask import request, session

from gpuslo.web.errors import RequestError

FIELD = "csrf_token"
HEADER = "X-CSRF-Token"
_KEY = "csrf"


def csrf_token() -> str:
    """This session's token (made on first use); templates put it in a hidden field of every form."""
    token = session.get(_KEY)
    if not isinstance(token, str):
        token = session[_KEY] = secrets.token_urlsafe(32)
    return token


def new_csrf_token() -> str:
    """A fresh token (after login, so a token planted before the login is worthless)."""
    session[_KEY] = secrets.token_urlsafe(32)
    return str(session[_KEY])


def _check_origin() -> None:
    site = request.headers.get("Sec-Fetch-Site", "").lower()
    origin = request.headers.get("Origin")
    if site in ("cross-site", "same-site") or (origin is not None and urlsplit(origin).netloc != request.host):
        raise RequestError(403, "cross_origin", "cross-site requests are refused")


def check_csrf(via: str | None) -> None:
    """Refuse a state-changing browser request without the session's token (403 csrf_failed)."""
    if via == "token":
        return
    _check_origin()
    if request.path.startswith("/api/") and via in ("bootstrap", "open"):
        return
    sent = request.headers.get(HEADER) or request.form.get(FIELD)
    expected = session.get(_KEY)
    if not sent or not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise RequestError(403, "csrf_failed", "the form is missing its CSRF token or the session expired; "
                                               "reload the page and try again")
