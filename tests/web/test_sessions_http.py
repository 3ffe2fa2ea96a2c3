"""Sessions, login limits, ingest 429 and framing headers over real HTTP, on SQLite and PostgreSQL.

Each test is a defect of issue 11: a cookie captured before logout kept working for 12 h; five wrong passwords
for a user from one address locked the real user out from everywhere; ingest 429 had no Retry-After; nothing
stopped framing (clickjacking); refused 401/403 requests left no audit trace.
"""

from __future__ import annotations

from datetime import UTC, datetime

from click.testing import CliRunner
from live_support import client, csrf_of, login, serve

from gpuslo.cli.main import main
from gpuslo.engine.access import hash_password
from gpuslo.engine.store import audit, credentials
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.web.ratelimit import AuditThrottle

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _user(core, name: str = "alice", password: str = "correct horse", role: str = "admin") -> None:
    with core.database.session() as session:
        credentials.create_user(session, name=name, role=role, password_hash=hash_password(password), now=NOW)


def _audit(core, **filters):
    with core.database.session(readonly=True) as session:
        return list(audit.iter_audit(session, AuditFilter(**filters)))


def test_a_cookie_captured_before_logout_is_refused_after_it(core):
    _user(core)
    with serve(core) as url, client(url) as browser, client(url) as thief:
        assert login(browser, "alice", "correct horse").status_code == 303
        captured = browser.cookies["gpuslo_session"]
        thief.cookies.set("gpuslo_session", captured)
        assert thief.get("/api/v1/violations").status_code == 200  # the stolen cookie works while logged in
        token = csrf_of(browser.get("/violations").text)
        assert browser.post("/logout", data={"csrf_token": token}).status_code == 303
        thief.cookies.set("gpuslo_session", captured)  # replay the cookie exactly as it was before logout
        assert thief.get("/api/v1/violations").status_code == 401
        page = thief.get("/violations")
        assert page.status_code == 302 and page.headers["Location"].startswith("/login")


def test_a_password_change_ends_every_session_of_the_user(core):
    _user(core)
    with serve(core) as url, client(url) as laptop, client(url) as phone:
        assert login(laptop, "alice", "correct horse").status_code == 303
        assert login(phone, "alice", "correct horse").status_code == 303
        assert phone.get("/api/v1/violations").status_code == 200
        changed = CliRunner().invoke(main, ["users", "set-password", "alice"], input="a new long secret\n" * 2,
                                     env={"GPUSLO_DATABASE_URL": core.database.url})
        assert changed.exit_code == 0, changed.output
        assert laptop.get("/api/v1/violations").status_code == 401
        assert phone.get("/api/v1/violations").status_code == 401
        assert login(phone, "alice", "correct horse").status_code == 401
        assert login(phone, "alice", "a new long secret").status_code == 303
        assert phone.get("/api/v1/violations").status_code == 200
    assert [r.action for r in _audit(core, target="user:alice") if r.action == "user.set_password"]


def test_a_guesser_cannot_lock_the_real_user_out_from_another_address(core):
    _user(core, "admin")
    # A small per-address allowance, so that its slow refill (8 per minute) cannot hide the limit on a busy machine.
    settings = core.settings.with_overrides(login_failures_per_address_per_minute=8)
    with serve(core, settings) as url, client(url, "127.0.0.7") as attacker, client(url, "127.0.0.1") as real:
        for _ in range(settings.login_failures_per_minute):
            assert login(attacker, "admin", "guess guess").status_code == 401
        locked = login(attacker, "admin", "correct horse")
        assert locked.status_code == 429 and int(locked.headers["Retry-After"]) >= 1
        assert login(real, "admin", "correct horse").status_code == 303  # the real admin is not locked out
        # The per-address limit still stops one address spraying many user names.
        answers = [login(attacker, f"user{n}", "guess guess").status_code
                   for n in range(settings.login_failures_per_address_per_minute)]
        assert answers[0] == 401 and answers[-1] == 429
    failed = _audit(core, action="login.failed")
    assert {r.source_ip for r in failed} == {"127.0.0.7"}


def test_ingest_429_carries_retry_after(core):
    with core.database.session() as session:
        _, token = credentials.create_token(session, name="probe", scopes=["ingest"], now=NOW)
    settings = core.settings.with_overrides(ingest_requests_per_second=0.2, ingest_burst=1)
    with serve(core, settings) as url, client(url) as http:
        headers = {"Authorization": f"Bearer {token}"}
        assert http.post("/api/v1/events", json=[], headers=headers).status_code in (200, 202, 400, 422)
        limited = http.post("/api/v1/events", json=[], headers=headers)
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(limited.headers["Retry-After"]) <= 5


def test_every_response_refuses_to_be_framed(core):
    _user(core)
    with serve(core) as url, client(url) as http:
        answers = [http.get(path) for path in ("/login", "/healthz", "/api/v1/violations", "/violations",
                                                "/no-such-page", "/static/style.css")]
        answers.append(http.post("/api/v1/events", json=[]))
        answers.append(login(http, "alice", "wrong password"))
        answers.append(http.get("/metrics"))
        assert {a.status_code for a in answers} >= {200, 302, 401, 404}
        for answer in answers:
            assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"], answer.url
            assert answer.headers["X-Frame-Options"] == "DENY", answer.url


def test_refused_requests_are_audited_with_a_bound_per_address(core):
    _user(core, "vera", role="viewer")
    with core.database.session() as session:
        _, token = credentials.create_token(session, name="reader", scopes=["read"], now=NOW)
    settings = core.settings.with_overrides(refused_audit_per_minute=3)
    with serve(core, settings) as url, client(url, "127.0.0.9") as noisy, client(url, "127.0.0.1") as other:
        for _ in range(40):
            assert noisy.get("/api/v1/violations", headers={"Authorization": "Bearer gps_wrong"}).status_code == 401
        assert other.get("/api/v1/audit", headers={"Authorization": f"Bearer {token}"}).status_code == 403
        assert other.get("/api/v1/violations").status_code == 401
    denied = _audit(core, action="access.denied")
    noisy_rows = [r for r in denied if r.source_ip == "127.0.0.9"]
    assert len(noisy_rows) == 3 and all("401 invalid_token" in r.detail for r in noisy_rows)
    others = [r for r in denied if r.source_ip == "127.0.0.1"]
    assert [r.detail.split(":")[0] for r in others] == ["403 forbidden", "401 unauthenticated"]
    assert others[0].actor == "token:reader" and others[0].target_id == "admin_api.list_audit"


def test_the_throttle_reports_how_many_refusals_it_left_out():
    now = [0.0]
    throttle = AuditThrottle(2, total_per_minute=100, clock=lambda: now[0])
    assert [throttle.admit("a") for _ in range(5)] == [(True, 0), (True, 0), (False, 0), (False, 0), (False, 0)]
    assert throttle.admit("b") == (True, 0)  # another address has its own allowance
    now[0] = 61.0
    assert throttle.admit("a") == (True, 3)  # the first row of the next minute counts the suppressed ones
    assert throttle.admit("a") == (True, 0)
    busy = AuditThrottle(100, total_per_minute=3, clock=lambda: now[0])
    assert [busy.admit(f"10.0.0.{n}")[0] for n in range(5)] == [True, True, True, False, False]
