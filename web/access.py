"""Who is asking, and may they: bearer tokens, login sessions, a trusted proxy header, and the bootstrap mode.

Every request passes `enforce` (a before_request hook): it resolves the principal, checks the route's
permission (gpuslo.web.policy), CSRF on state-changing browser requests (gpuslo.web.csrf) and the ingest rate
limit. Bootstrap: while no user and no token has ever been created, the server answers loopback clients only,
with every permission, and says so in the UI banner and the log; the first user or token ends it for good.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from typing import Any

from flask import Flask, g, redirect, request, session, url_for
from werkzeug.wrappers import Response

from gpuslo.engine.access import ROLES, SCOPES, permissions_of_role, permissions_of_scopes
from gpuslo.engine.config import Settings
from gpuslo.engine.errors import GpusloError
from gpuslo.web.context import current_core
from gpuslo.web.csrf import check_csrf, csrf_token
from gpuslo.web.errors import RequestError, error_response, wants_json
from gpuslo.web.policy import PUBLIC, ROUTE_POLICY
from gpuslo.web.ratelimit import AuditThrottle, RateLimiter

log = logging.getLogger(__name__)
STATE = "gpuslo.access"
BOOTSTRAP, OPEN, TOKEN, SESSION, PROXY = "bootstrap", "open", "token", "session", "proxy"
ALL_PERMISSIONS = frozenset(SCOPES)
BOOTSTRAP_HINT = ("no user or token exists yet, so gpuslo answers loopback clients only; create one with "
                  "`gpuslo users create NAME --role admin` or `gpuslo api-tokens create`")


@dataclass(frozen=True)
class Principal:
    """An authenticated caller; `via` says how (token, session, proxy) or why not needed (bootstrap, open)."""

    name: str
    via: str
    permissions: frozenset[str]
    role: str | None = None
    token_id: int | None = None

    @property
    def actor(self) -> str | None:
        """The name audit rows and history carry; None in bootstrap/open mode (the request may name one)."""
        if self.via in (BOOTSTRAP, OPEN):
            return None
        return f"token:{self.name}" if self.via == TOKEN else self.name


class AccessState:
    """Per-app access state: the rate limiters and whether credentials were seen (then bootstrap is over)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        per_minute = max(1, settings.login_failures_per_minute)
        self.login_limiter = RateLimiter(per_minute / 60.0, per_minute)
        per_address = max(1, settings.login_failures_per_address_per_minute)
        self.login_address_limiter = RateLimiter(per_address / 60.0, per_address)
        self.refusals = AuditThrottle(settings.refused_audit_per_minute)
        self.proxy_warning_given = False
        rate = settings.ingest_requests_per_second
        self.ingest_limiter = RateLimiter(rate, max(1, settings.ingest_burst)) if rate > 0 else None
        self.credentials_seen = False

    def credentials_exist(self) -> bool:
        """Whether a user or token exists. Only the positive fact is kept: credentials are never removed for
        this purpose (revoked tokens count), so once seen, bootstrap is over for good. The negative is asked
        anew every time (one driver statement): a credential that the CLI or another replica creates must end
        bootstrap for this process's very next request, and a cached "none" would keep loopback clients
        anonymous admins for as long as it lived."""
        if not self.credentials_seen:
            self.credentials_seen = current_core().accounts.any_credentials()
        return self.credentials_seen


def state() -> AccessState:
    from flask import current_app

    found: AccessState = current_app.extensions[STATE]
    return found


def current_principal() -> Principal | None:
    found: Principal | None = g.get("principal")
    return found


def current_actor() -> str | None:
    """The logged-in user or token name; None when the request runs unauthenticated (bootstrap/open)."""
    principal = current_principal()
    return principal.actor if principal else None


def record_audit(action: str, *, actor: str | None = None, target_type: str | None = None,
                 target_id: object = None, before: Any = None, after: Any = None, detail: str | None = None) -> None:
    """One audit row for an action the web layer performs itself (login, logout, failed login)."""
    current_core().accounts.record_audit(action, actor=actor or current_actor() or "anonymous",
                                         target_type=target_type, target_id=target_id, before=before,
                                         after=after, source=request.remote_addr, detail=detail)


def throttled_audit(action: str, *, actor: str | None = None, target_type: str | None = None,
                    target_id: object = None, detail: str | None = None) -> None:
    """An audit row for a refused request, at most `refused_audit_per_minute` per client address; the suppressed
    ones are counted in the next row's detail. A failing database never turns a refusal into a 500."""
    write, suppressed = state().refusals.admit(request.remote_addr or "?")
    if not write:
        return
    if suppressed:
        detail = f"{detail or ''} (+{suppressed} similar refusals from this address not recorded)".strip()
    try:
        record_audit(action, actor=actor, target_type=target_type, target_id=target_id, detail=detail)
    except GpusloError as exc:
        log.warning("could not audit a refused request: %s", exc)


def _audit_refusal(status: int, code: str) -> None:
    principal = current_principal()
    actor = principal.actor if principal is not None else None
    throttled_audit("access.denied", actor=actor or "anonymous", target_type="route",
                    target_id=request.endpoint or request.path,
                    detail=f"{status} {code}: {request.method} {request.path[:200]}")


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def _is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _from_bearer(header: str) -> Principal:
    scheme, _, clear = header.partition(" ")
    if scheme.lower() != "bearer" or not clear.strip():
        raise RequestError(401, "invalid_token", "use the header `Authorization: Bearer <token>`")
    token = current_core().accounts.find_token(clear.strip())
    if token is None:
        raise RequestError(401, "invalid_token", "the token is unknown or revoked")
    return Principal(token.name, TOKEN, permissions_of_scopes(token.scopes), token_id=token.id)


def _from_cookie() -> Principal | None:
    """The user of the signed session cookie, while its server-side web session lives."""
    name, sid = session.get("user"), session.get("sid")
    if not isinstance(name, str):
        return None
    user = current_core().accounts.session_user(sid if isinstance(sid, str) else None, name, _now())
    if user is None or user.disabled_at is not None:
        session.clear()  # logged out, expired, password changed, deleted or disabled: the session is over
        return None
    return Principal(user.name, SESSION, permissions_of_role(user.role), role=user.role)


def _from_proxy(settings: Settings) -> Principal | None:
    if settings.trusted_proxies and "gpuslo.proxy_addr" not in request.environ:
        return None  # proxies are listed and this peer is none of them: its user header is the client's own
    name = (request.headers.get(settings.auth_proxy_header) or "").strip()[:200]
    if not name:
        return None
    role = (request.headers.get(settings.auth_proxy_role_header) or "").strip().lower() \
        if settings.auth_proxy_role_header else ""
    role = role if role in ROLES else settings.auth_proxy_default_role
    return Principal(name, PROXY, permissions_of_role(role), role=role)


def resolve_principal(access: AccessState) -> Principal | None:
    """Bearer token, then session, then the proxy header, then open/bootstrap mode; None: nobody."""
    header = request.headers.get("Authorization")
    if header:
        return _from_bearer(header)
    found = _from_cookie()
    if found is None and access.settings.auth_proxy_header:
        found = _from_proxy(access.settings)
    if found is not None:
        return found
    if not access.settings.auth_required:
        return Principal("anonymous", OPEN, ALL_PERMISSIONS)
    if _is_loopback(request.remote_addr) and not access.credentials_exist():  # others: refused either way
        return Principal("anonymous", BOOTSTRAP, ALL_PERMISSIONS)
    return None


def _unauthenticated(access: AccessState) -> Response:
    if request.method == "GET" and not wants_json():
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
    message = "log in or send `Authorization: Bearer <token>`"
    if not access.credentials_exist():
        message = BOOTSTRAP_HINT
    response = error_response(RequestError(401, "unauthenticated", message))
    response.headers["WWW-Authenticate"] = 'Bearer realm="gpuslo"'
    return response


def _limit_ingest(access: AccessState, principal: Principal) -> None:
    limiter = access.ingest_limiter
    if limiter is None:
        return
    key = f"token:{principal.token_id}" if principal.token_id is not None else f"ip:{request.remote_addr}"
    if not limiter.spend(key):
        wait = limiter.retry_after(key)
        raise RequestError(429, "rate_limited", f"ingest limit reached; retry in {wait} s", retry_after=wait)


def enforce() -> Response | None:
    """The before_request hook: authenticate, authorize, check CSRF and the ingest rate; refusals (401, 403)
    are audited, bounded per address."""
    access = state()
    _warn_untrusted_proxy_headers(access)
    try:
        response = _enforce(access)
    except RequestError as exc:
        if exc.status in (401, 403):
            _audit_refusal(exc.status, exc.code)
        raise
    if response is not None and response.status_code == 401:
        _audit_refusal(401, "unauthenticated")
    return response


def _warn_untrusted_proxy_headers(access: AccessState) -> None:
    """Say once, loudly, that forwarding headers arrive but no proxy is trusted (they are ignored)."""
    if access.proxy_warning_given or access.settings.trusted_proxies:
        return
    if "X-Forwarded-For" in request.headers or "X-Forwarded-Proto" in request.headers:
        access.proxy_warning_given = True
        log.warning("a request from %s carries X-Forwarded-For/-Proto but trusted_proxies is empty: the headers "
                    "are ignored and every client behind the proxy is recorded, rate-limited and bootstrap-"
                    "checked under the proxy's address; set trusted_proxies to the proxy's address",
                    request.remote_addr)


def _enforce(access: AccessState) -> Response | None:
    endpoint = request.endpoint
    if endpoint is None:
        return None  # no route: Flask answers 404/405
    needed = ROUTE_POLICY.get(endpoint)
    if needed == PUBLIC:
        try:  # a public route (the health check above all) answers even when the database does not
            principal = resolve_principal(access)
        except GpusloError:
            principal = None
    else:
        principal = resolve_principal(access)
    g.principal = principal
    if needed is None:
        log.error("route %s has no access policy: refused (add it to gpuslo.web.policy)", endpoint)
        raise RequestError(403, "no_policy", "this route has no access policy")
    if needed != PUBLIC:
        if principal is None:
            return _unauthenticated(access)
        if needed not in principal.permissions:
            raise RequestError(403, "forbidden", f"this needs the {needed!r} permission")
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        check_csrf(principal.via if principal else None)
    if endpoint in ("api.post_events", "integrations_api.alertmanager_webhook") and principal is not None:
        _limit_ingest(access, principal)
    return None


def init_app(app: Flask, settings: Settings) -> None:
    """Install the access state, the enforcing hook and the template helpers; warn loudly in bootstrap."""
    access = AccessState(settings)
    app.extensions[STATE] = access
    app.before_request(enforce)
    app.add_template_global(csrf_token)
    app.context_processor(lambda: {"principal": g.get("principal"), "bootstrap_hint": BOOTSTRAP_HINT})
    if not settings.auth_required:
        log.warning("auth_required is false: every client has every permission (never do this on a network)")
    with app.app_context():
        if settings.auth_required and not access.credentials_exist():
            log.warning("BOOTSTRAP MODE: %s", BOOTSTRAP_HINT)
