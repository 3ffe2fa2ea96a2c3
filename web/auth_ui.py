"""Login and logout of humans: a form, a password check, a rate limit on failures, an audit row each time."""

from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, session, url_for
from werkzeug.wrappers import Response

from gpuslo.engine.access import check_password
from gpuslo.web.access import current_principal, record_audit, state, throttled_audit
from gpuslo.web.context import current_core
from gpuslo.web.csrf import new_csrf_token

auth = Blueprint("auth", __name__)
MAX_PASSWORD = 1024
# Checked when the user is unknown, so a wrong name costs as long as a wrong password (no user enumeration).
_DUMMY_HASH = "scrypt:32768:8:1$gpuslo$" + "0" * 128


def _safe_next(target: str | None) -> str:
    """Only a local path: an open redirect would make the login page a phishing helper."""
    if target and target.startswith("/") and not target.startswith(("//", "/\\")):
        return target
    return url_for("ui.index")


def _form(error: str | None = None, status: int = 200, name: str = "") -> tuple[str, int]:
    return render_template("login.html", error=error, name=name,
                           next=request.values.get("next", "")), status


@auth.route("/login", methods=["GET", "POST"])
def login() -> Response | tuple[str, int]:
    return _form() if request.method == "GET" else _attempt()


def _attempt() -> Response | tuple[str, int]:
    name = (request.form.get("username") or "").strip()[:200]
    password = (request.form.get("password") or "")[:MAX_PASSWORD]
    access = state()
    # Per user *and* address, plus per address: guessing admin's password from one address never locks the real
    # admin out from another, and one address cannot spray many user names either.
    buckets = ((access.login_limiter, f"{name.lower()}@{request.remote_addr}"),
               (access.login_address_limiter, f"ip:{request.remote_addr}"))
    if not all(limiter.allowed(key) for limiter, key in buckets):
        throttled_audit("login.failed", actor=name or "(empty)", target_type="user", target_id=name or None,
                        detail="rate limited")
        page, _ = _form("Too many failed logins; wait a minute and try again.", name=name)
        retry = max(limiter.retry_after(key) for limiter, key in buckets)
        return Response(page, status=429, headers={"Retry-After": str(retry)}, mimetype="text/html")
    user = current_core().accounts.user(name) if name else None
    good = check_password(user.password_hash if user else _DUMMY_HASH, password)
    if user is None or not good or user.disabled_at is not None:
        for limiter, key in buckets:
            limiter.spend(key)
        reason = "unknown user" if user is None else "disabled user" if good else "wrong password"
        record_audit("login.failed", actor=name or "(empty)", target_type="user", target_id=name or None,
                     detail=reason)
        return _form("Wrong user name or password.", 401, name)
    sid = current_core().accounts.start_session(user.name, lifetime_s=state().settings.session_hours * 3600)
    session.clear()  # a new session on login: nothing from before it survives (session fixation)
    session["user"], session["sid"] = user.name, sid
    session.permanent = True
    new_csrf_token()
    record_audit("login", actor=user.name, target_type="user", target_id=user.name)
    return redirect(_safe_next(request.form.get("next")), code=303)


@auth.post("/logout")
def logout() -> Response:
    principal = current_principal()
    sid = session.get("sid")
    if isinstance(sid, str):  # ended server-side: the cookie is worthless from now on, wherever a copy is
        current_core().accounts.end_session(sid)
    if principal is not None and principal.via == "session":
        record_audit("logout", actor=principal.name, target_type="user", target_id=principal.name)
    session.clear()
    return redirect(url_for("auth.login"), code=303)
