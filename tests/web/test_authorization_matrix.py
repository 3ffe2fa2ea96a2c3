"""Every route × every kind of caller: allowed, or 401/403 (a redirect to the login page for anonymous pages).

The route list comes from app.url_map, so a new route without an entry in gpuslo.web.policy fails here.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from access_support import CSRF, ROLE_USERS, act_as, bearer, create_accounts
from web_support import seed_violation

from gpuslo.engine.access import permissions_of_role, permissions_of_scopes
from gpuslo.engine.events import parse_event
from gpuslo.web import create_app
from gpuslo.web.policy import PUBLIC, ROUTE_POLICY

CALLERS = ["anonymous", "viewer", "operator", "admin", "token:ingest", "token:read", "token:operate",
           "token:admin"]


def _permissions(caller: str) -> frozenset[str]:
    if caller == "anonymous":
        return frozenset()
    kind, _, name = caller.partition(":")
    return permissions_of_scopes([name]) if kind == "token" else permissions_of_role(caller)


def _sample_url(rule: Any, values: dict[str, Any]) -> str:
    """The rule's path with every variable filled from `values` (converters with choices take the first)."""
    def fill(match: re.Match[str]) -> str:
        converter, name = match.group(1), match.group(2)
        if name in values:
            return str(values[name])
        choices = re.search(r"any\(([^)]*)\)", converter or "")
        return choices.group(1).split(",")[0].strip() if choices else "1"
    return re.sub(r"<(?:([^:>]+(?:\([^)]*\))?):)?([^>]+)>", fill, rule.rule)


def _routes(app: Any) -> list[tuple[str, str, str]]:
    found = []
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found.append((rule.endpoint, method, rule))
    return found


def test_every_route_has_a_policy(core):
    app = create_app(core.settings, core=core)
    endpoints = {rule.endpoint for rule in app.url_map.iter_rules()}
    assert sorted(endpoints - set(ROUTE_POLICY)) == [], "add these endpoints to gpuslo.web.policy.ROUTE_POLICY"
    assert sorted(set(ROUTE_POLICY) - endpoints) == [], "gpuslo.web.policy names endpoints that do not exist"


def _call(client: Any, caller: str, method: str, url: str, tokens: dict[str, str]) -> Any:
    headers = {"X-CSRF-Token": CSRF}
    if caller.startswith("token:"):
        act_as(client, None)
        headers |= bearer(tokens[caller.removeprefix("token:")])
    else:
        act_as(client, None if caller == "anonymous" else ROLE_USERS[caller])
    if method == "GET":
        return client.get(url, headers=headers)
    return client.open(url, method=method, headers=headers, json={})


def _denied(response: Any, caller: str) -> bool:
    if caller == "anonymous" and response.status_code in (301, 302) and "/login" in response.headers["Location"]:
        return True
    return response.status_code in (401, 403) and b"csrf_failed" not in response.data


def test_authorization_matrix(core):
    tokens_made = create_accounts(core.database)
    frag = parse_event({"id": "m-1", "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z",
                        "host": "node-1", "gpu": 0, "attrs": {"fragmentation_ratio": 0.71}})
    values = {"violation_id": seed_violation(core.database, [frag]).id, "silence_id": 1,
              "token_id": tokens_made.spare_token_id, "filename": "style.css"}
    app = create_app(core.settings, core=core)
    client = app.test_client()
    wrong = []
    checked = 0
    for endpoint, method, rule in _routes(app):
        needed = ROUTE_POLICY[endpoint]
        url = _sample_url(rule, values)
        for caller in CALLERS:
            response = _call(client, caller, method, url, tokens_made.tokens)
            allowed = needed == PUBLIC or needed in _permissions(caller)
            denied = _denied(response, caller)
            if needed == PUBLIC:
                denied = response.status_code == 403
            elif not allowed and caller != "anonymous":
                denied = response.status_code == 403  # authenticated but not permitted: 403, never 401
            if allowed == denied:
                wrong.append(f"{caller:14} {method:4} {url}: {response.status_code} (expected "
                             f"{'allowed' if allowed else 'refused'})")
            response.close()  # static files are streamed from an open file
            checked += 1
    assert wrong == []
    assert checked >= len(CALLERS) * len(ROUTE_POLICY)


@pytest.mark.parametrize("header", ["Bearer nope", "Basic YWxpY2U6eA==", "Bearer "])
def test_bad_credentials_are_401_in_the_envelope(core, header):
    create_accounts(core.database)
    client = create_app(core.settings, core=core).test_client()
    response = client.get("/api/v1/violations", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "invalid_token"


# What the issue asks, written independently of gpuslo.web.policy: who may call a few telling routes.
EXPECTED_CALLERS = {
    "api.post_events": {"token:ingest"},
    "api.list_violations": {"viewer", "operator", "admin", "token:read", "token:operate", "token:admin"},
    "lifecycle_api.change_status": {"operator", "admin", "token:operate", "token:admin"},
    "lifecycle_ui.create_silence": {"operator", "admin", "token:operate", "token:admin"},
    "notifications_api.retry_notification": {"operator", "admin", "token:operate", "token:admin"},
    "notifications_ui.notifications_page": {"viewer", "operator", "admin", "token:read", "token:operate",
                                            "token:admin"},
    "admin_api.create_token": {"admin", "token:admin"},
    "admin_api.reload_rulebooks": {"admin", "token:admin"},
    "audit_ui.audit_page": {"admin", "token:admin"},
    "ops.healthz": set(CALLERS),
}


@pytest.mark.parametrize("endpoint", sorted(EXPECTED_CALLERS))
def test_policy_matches_the_issue(endpoint):
    needed = ROUTE_POLICY[endpoint]
    allowed = {c for c in CALLERS if needed == PUBLIC or needed in _permissions(c)}
    assert allowed == EXPECTED_CALLERS[endpoint]
