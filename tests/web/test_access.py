"""Access control on the real core: bootstrap mode, logins and their rate limit, CSRF, actors, proxy mode."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from access_support import CSRF, NOW, act_as, bearer, create_accounts
from sqlalchemy import event, text
from web_support import app_settings, seed_violation

from gpuslo.engine.access import hash_password
from gpuslo.engine.events import parse_event
from gpuslo.engine.store import audit, credentials
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.engine.store.db import Database
from gpuslo.web import create_app
from gpuslo.web.sessions import load_secret_key


def _frag(event_id: str = "a-1"):
    return parse_event({"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z",
                        "host": "node-1", "gpu": 0, "attrs": {"fragmentation_ratio": 0.71}})


def _audit_rows(core, **filters):
    with core.database.session(readonly=True) as session:
        return list(audit.iter_audit(session, AuditFilter(**filters)))


def test_bootstrap_is_open_to_loopback_only_until_a_credential_exists(core):
    client = create_app(core.settings, core=core).test_client()
    page = client.get("/violations")
    assert page.status_code == 200 and 'id="auth-open-banner"' in page.get_data(as_text=True)
    remote = client.get("/api/v1/violations", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert remote.status_code == 401 and "gpuslo users create" in remote.get_json()["error"]["message"]
    assert client.get("/api/v1/violations").status_code == 200
    with core.database.session() as session:
        _, clear = credentials.create_token(session, name="probe", scopes=["ingest"], now=NOW)
    assert client.get("/api/v1/violations").status_code == 401  # bootstrap is over, even on loopback
    assert client.get("/violations").headers["Location"].startswith("/login")
    with core.database.session() as session:
        credentials.revoke_token(session, credentials.find_token(session, clear).id, now=NOW)
    assert client.get("/api/v1/violations").status_code == 401  # revoking every token never reopens it


def test_login_logout_and_rate_limit(core):
    with core.database.session() as session:
        credentials.create_user(session, name="alice", role="operator", password_hash=hash_password("correct horse"),
                                now=NOW)
    app = create_app(core.settings, core=core)
    client = app.test_client()
    html = client.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)
    assert client.post("/login", data={"username": "alice", "password": "x"}).status_code == 403  # no CSRF token
    for _ in range(5):
        failed = client.post("/login", data={"username": "alice", "password": "wrong", "csrf_token": token})
        assert failed.status_code == 401 and "Wrong user name or password" in failed.get_data(as_text=True)
    limited = client.post("/login", data={"username": "alice", "password": "correct horse", "csrf_token": token})
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    # The bucket is per user and address: the real alice, elsewhere, still logs in (no lockout by a guesser).
    other = app.test_client()
    other_token = re.search(r'name="csrf_token" value="([^"]+)"',
                            other.get("/login").get_data(as_text=True)).group(1)
    from_elsewhere = other.post("/login", data={"username": "alice", "password": "correct horse",
                                                "csrf_token": other_token},
                                environ_base={"REMOTE_ADDR": "10.9.9.9"})
    assert from_elsewhere.status_code == 303
    failures = _audit_rows(core, action="login.failed")
    assert len(failures) == 6 and {f.source_ip for f in failures} == {"127.0.0.1"}
    assert [f.detail for f in failures].count("wrong password") == 5 and failures[-1].detail == "rate limited"


def test_successful_login_sets_a_secure_session_and_the_actor(core, tmp_path: Path):
    with core.database.session() as session:
        credentials.create_user(session, name="bob", role="operator", password_hash=hash_password("battery staple"),
                                now=NOW)
    vid = seed_violation(core.database, [_frag()]).id
    settings = core.settings.with_overrides(session_cookie_secure=True)
    client = create_app(settings, core=core).test_client()
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").get_data(as_text=True)).group(1)
    response = client.post("/login", data={"username": "bob", "password": "battery staple", "csrf_token": token,
                                           "next": f"/violations/{vid}"})
    assert response.status_code == 303 and response.headers["Location"] == f"/violations/{vid}"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" in cookie
    page = client.get(f"/violations/{vid}").get_data(as_text=True)
    assert 'id="who-name">bob (operator)<' in page and "auth-open-banner" not in page
    fresh = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert fresh != token  # a new CSRF token after login
    refused = client.post(f"/violations/{vid}/acknowledge", data={"actor": "mallory"})
    assert refused.status_code == 403 and "CSRF" in refused.get_data(as_text=True)
    done = client.post(f"/violations/{vid}/acknowledge", data={"actor": "mallory", "csrf_token": fresh})
    assert done.status_code == 303
    detail = client.get(f"/api/v1/violations/{vid}").get_json()
    assert detail["acknowledged_by"] == "bob"  # the login, never the name the form claims
    assert client.post("/logout", data={"csrf_token": fresh}).status_code == 303
    assert client.get(f"/violations/{vid}").status_code == 302
    # the CSRF refusal (403) is audited too
    assert [a.action for a in _audit_rows(core, actor="bob")] == ["login", "access.denied", "acknowledge", "logout"]


def test_csrf_on_api_sessions_and_cross_origin_posts(core):
    accounts = create_accounts(core.database)
    vid = seed_violation(core.database, [_frag()]).id
    client = create_app(core.settings, core=core).test_client()
    act_as(client, "otto")
    assert client.post(f"/api/v1/violations/{vid}/comments", json={"comment": "x"}).status_code == 403
    ok = client.post(f"/api/v1/violations/{vid}/comments", json={"comment": "x"}, headers={"X-CSRF-Token": CSRF})
    assert ok.status_code == 201
    act_as(client, None)
    with_token = client.post(f"/api/v1/violations/{vid}/comments", json={"comment": "y"},
                             headers=bearer(accounts.tokens["operate"]))
    assert with_token.status_code == 201 and with_token.get_json()["status"] == "open"
    history = client.get(f"/api/v1/violations/{vid}", headers=bearer(accounts.tokens["read"])).get_json()["history"]
    assert [h["actor"] for h in history[-2:]] == ["otto", "token:operate-bot"]


def test_cross_origin_post_is_refused_in_bootstrap_mode(core):
    vid = seed_violation(core.database, [_frag()]).id
    client = create_app(core.settings, core=core).test_client()
    evil = client.post(f"/api/v1/violations/{vid}/resolve", headers={"Origin": "https://evil.example"})
    assert evil.status_code == 403 and evil.get_json()["error"]["code"] == "cross_origin"
    sneaky = client.post(f"/api/v1/violations/{vid}/resolve", headers={"Sec-Fetch-Site": "cross-site"})
    assert sneaky.status_code == 403
    assert client.post(f"/api/v1/violations/{vid}/resolve", headers={"Origin": "http://localhost"}).status_code == 200


def test_proxy_header_mode(core):
    create_accounts(core.database)
    settings = core.settings.with_overrides(auth_proxy_header="X-Forwarded-User",
                                            auth_proxy_role_header="X-Forwarded-Role")
    client = create_app(settings, core=core).test_client()
    assert client.get("/api/v1/violations").status_code == 401
    viewer = {"X-Forwarded-User": "carol"}
    assert client.get("/api/v1/violations", headers=viewer).status_code == 200
    assert client.post("/api/v1/silences", headers=viewer, json={}).status_code == 403
    admin = viewer | {"X-Forwarded-Role": "admin"}
    assert client.get("/api/v1/audit", headers=admin).status_code == 200
    # Without the setting, the header means nothing.
    plain = create_app(core.settings, core=core).test_client()
    assert plain.get("/api/v1/violations", headers=admin).status_code == 401


def test_ingest_rate_limit_per_token(database, tmp_path):
    from gpuslo.engine.core import Gpuslo

    rules = tmp_path / "rules"
    rules.mkdir()
    core = Gpuslo.open(app_settings(database, rules, ingest_requests_per_second=0.001, ingest_burst=2))
    try:
        accounts = create_accounts(core.database)
        client = create_app(core.settings, core=core).test_client()
        event = {"id": "r-1", "kind": "gpu_xid", "time": "2025-01-01T00:00:00Z", "host": "n", "attrs": {"xid": 79}}
        for token in (accounts.tokens["ingest"], accounts.tokens["ingest"]):
            assert client.post("/api/v1/events", json=event, headers=bearer(token)).status_code in (200, 202)
        limited = client.post("/api/v1/events", json=event, headers=bearer(accounts.tokens["ingest"]))
        assert limited.status_code == 429 and limited.get_json()["error"]["code"] == "rate_limited"
        assert client.post("/api/v1/events", json=event, headers=bearer(accounts.tokens["admin"])).status_code == 403
    finally:
        core.close()


def test_tokens_are_stored_hashed_and_shown_once(core):
    accounts = create_accounts(core.database)
    client = create_app(core.settings, core=core).test_client()
    made = client.post("/api/v1/tokens", json={"name": "ci", "scopes": ["read"]},
                       headers=bearer(accounts.tokens["admin"]))
    assert made.status_code == 201
    clear = made.get_json()["token"]
    listed = client.get("/api/v1/tokens", headers=bearer(accounts.tokens["admin"])).get_json()["items"]
    assert all("token" not in item and "token_hash" not in item for item in listed)
    with core.database.engine.connect() as connection:
        rows = [tuple(map(str, row)) for table in ("api_tokens", "audit_log")
                for row in connection.execute(text(f"SELECT * FROM {table}"))]
        hashes = set(connection.scalars(text("SELECT token_hash FROM api_tokens")))
    assert not any(clear in cell for row in rows for cell in row)
    assert not any(tok in cell for tok in accounts.tokens.values() for row in rows for cell in row)
    assert hashlib.sha256(clear.encode()).hexdigest() in hashes
    assert client.get("/api/v1/violations", headers=bearer(clear)).status_code == 200
    bad = client.post("/api/v1/tokens", json={"name": "x", "scopes": ["root"]},
                      headers=bearer(accounts.tokens["admin"]))
    assert bad.status_code == 400 and "unknown scope" in bad.get_json()["error"]["message"]


def test_secret_key_is_made_once_private_and_reused(tmp_path, core):
    settings = core.settings.with_overrides(secret_key="", secret_key_file=tmp_path / "var" / "secret_key")
    first = load_secret_key(settings)
    assert len(first) >= 32 and (tmp_path / "var" / "secret_key").stat().st_mode & 0o777 == 0o600
    assert load_secret_key(settings) == first
    assert load_secret_key(settings.with_overrides(secret_key="k" * 40)) == "k" * 40


def _statements(database):
    """The SQL statements the database is sent, recorded from now on."""
    sent: list[str] = []
    event.listen(database.engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    return sent


def test_bootstrap_asks_one_statement_per_loopback_request_and_none_once_credentials_are_seen(core):
    """The fast paths: in bootstrap a loopback request asks one driver statement (no ORM session), a remote
    request to a public route none (refused or not, its answer cannot depend on it); once a credential is seen
    no request asks again."""
    client = create_app(core.settings, core=core).test_client()
    sent = _statements(core.database)

    def asked() -> list[str]:
        return [s for s in sent if "api_tokens" in s]

    assert client.get("/api/v1/violations").status_code == 200
    assert asked() == ["SELECT EXISTS (SELECT 1 FROM users) OR EXISTS (SELECT 1 FROM api_tokens)"]
    sent.clear()
    assert client.get("/healthz", environ_base={"REMOTE_ADDR": "10.1.2.3"}).status_code == 200
    assert asked() == []
    create_accounts(core.database)
    assert client.get("/api/v1/violations").status_code == 401
    sent.clear()
    for _ in range(3):
        assert client.get("/api/v1/violations").status_code == 401
        assert client.get("/api/v1/violations", environ_base={"REMOTE_ADDR": "10.1.2.3"}).status_code == 401
    assert asked() == []


def test_a_credential_created_by_another_process_ends_bootstrap_at_the_next_request(core, tmp_path):
    """Nothing negative is cached: a token or user written through another connection pool (the CLI, a fleet
    replica) refuses the very next anonymous loopback request, write or read."""
    client = create_app(core.settings, core=core).test_client()
    for _ in range(3):
        assert client.get("/api/v1/violations").status_code == 200
    other = Database(core.database.url)
    try:
        with other.session() as session:
            credentials.create_user(session, name="root", role="admin", password_hash=hash_password("a long password"),
                                    now=NOW)
    finally:
        other.dispose()
    assert client.get("/api/v1/violations").status_code == 401
    ingest = client.post("/api/v1/events", json=[], headers={"Content-Type": "application/json"})
    assert ingest.status_code in (401, 403)
    remote = client.get("/api/v1/violations", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert "gpuslo users create" not in remote.get_json()["error"]["message"]
