"""The audit log: a row per action in the action's transaction, the /audit page, CSV/JSON export, retention."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from access_support import NOW, act_as, bearer, create_accounts
from sqlalchemy import func, select, update
from web_support import seed_violation

from gpuslo.engine.errors import InvalidTransition
from gpuslo.engine.events import parse_event
from gpuslo.engine.store import audit, repository
from gpuslo.engine.store.access_models import AuditRow
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.engine.store.models import EventRow
from gpuslo.web import create_app


def _frag(event_id: str):
    return parse_event({"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z",
                        "host": "node-1", "gpu": 0, "attrs": {"fragmentation_ratio": 0.71}})


def _rows(core, **filters):
    with core.database.session(readonly=True) as session:
        return list(audit.iter_audit(session, AuditFilter(**filters)))


def test_every_action_is_audited_with_before_after_and_source(core):
    accounts = create_accounts(core.database)
    vid = seed_violation(core.database, [_frag("f-1")]).id
    client = create_app(core.settings, core=core).test_client()
    ops = bearer(accounts.tokens["operate"]) | {"X-Forwarded-For": "ignored"}
    remote = {"REMOTE_ADDR": "10.0.0.7"}
    base = f"/api/v1/violations/{vid}"
    for path, body in ((f"{base}/acknowledge", {"comment": "on it"}), (f"{base}/resolve", {}),
                       (f"{base}/reopen", {}), (f"{base}/comments", {"comment": "note"})):
        assert client.post(path, json=body, headers=ops, environ_base=remote).status_code in (200, 201)
    silence = client.post("/api/v1/silences", json={"matchers": {"host": "node-1"}, "duration": "1h",
                                                    "comment": "maint"}, headers=ops, environ_base=remote).get_json()
    client.post(f"/api/v1/silences/{silence['id']}/expire", json={}, headers=ops, environ_base=remote)
    admin = bearer(accounts.tokens["admin"])
    assert client.post("/api/v1/rulebooks/reload", headers=admin, environ_base=remote).status_code == 200
    made = client.post("/api/v1/tokens", json={"name": "x", "scopes": ["read"]}, headers=admin,
                       environ_base=remote).get_json()
    client.post(f"/api/v1/tokens/{made['id']}/revoke", headers=admin, environ_base=remote)
    rows = _rows(core)
    assert [(r.actor, r.action, r.target_type) for r in rows] == [
        ("token:operate-bot", "acknowledge", "violation"), ("token:operate-bot", "resolve", "violation"),
        ("token:operate-bot", "reopen", "violation"), ("token:operate-bot", "comment", "violation"),
        ("token:operate-bot", "silence.create", "silence"), ("token:operate-bot", "silence.expire", "silence"),
        ("token:admin-bot", "rulebook.reload", "rulebooks"), ("token:admin-bot", "token.create", "token"),
        ("token:admin-bot", "token.revoke", "token")]
    assert {r.source_ip for r in rows} == {"10.0.0.7"}
    ack, resolve = rows[0], rows[1]
    assert (ack.before["status"], ack.after["status"], ack.after["acknowledged_by"]) == (
        "open", "acknowledged", "token:operate-bot")
    assert ack.detail == "on it" and ack.target_id == str(vid)
    assert (resolve.before["status"], resolve.after["status"]) == ("acknowledged", "resolved")
    assert rows[4].before is None and rows[4].after["matchers"] == {"host": "node-1"}
    assert rows[5].before["expired_at"] is None and rows[5].after["expired_by"] == "token:operate-bot"
    assert rows[8].before["revoked_at"] is None and rows[8].after["revoked_at"] is not None


def test_a_refused_action_leaves_no_audit_row(core):
    vid = seed_violation(core.database, [_frag("f-1")]).id
    core.lifecycle.resolve(vid, actor="alice")
    with pytest.raises(InvalidTransition):
        core.lifecycle.resolve(vid, actor="alice")  # rolled back: the audit row goes with it
    assert [r.action for r in _rows(core)] == ["resolve"]


def test_audit_page_filters_pages_and_escapes(core):
    accounts = create_accounts(core.database)
    vid = seed_violation(core.database, [_frag("f-1")]).id
    for n in range(3):
        core.lifecycle.comment(vid, actor=f"<b>user{n % 2}</b>", comment=f"c{n}", source="10.0.0.1")
    client = create_app(core.settings, core=core).test_client()
    act_as(client, "ada")
    html = client.get("/audit?actor=<b>user0</b>&page_size=1").get_data(as_text=True)
    assert html.count('class="audit-row"') == 1 and "Page 1 · 2 in all" in html and 'id="page-next"' in html
    assert "&lt;b&gt;user0&lt;/b&gt;" in html and "<b>user0</b>" not in html
    act_as(client, "otto")
    assert client.get("/audit").status_code == 403
    listing = client.get("/api/v1/audit?action=comment&page_size=2", headers=bearer(accounts.tokens["admin"]))
    body = listing.get_json()
    assert body["total"] == 3 and len(body["items"]) == 2 and body["has_next"]
    assert client.get("/api/v1/audit?page_size=0", headers=bearer(accounts.tokens["admin"])).status_code == 400


def test_csv_and_json_export(core):
    accounts = create_accounts(core.database)
    vid = seed_violation(core.database, [_frag("f-1")]).id
    core.lifecycle.comment(vid, actor="=cmd|' /C calc'!A0", comment="x,\"y\"\nz", source="10.0.0.1")
    core.lifecycle.acknowledge(vid, actor="bob", source="10.0.0.2")
    client = create_app(core.settings, core=core).test_client()
    admin = bearer(accounts.tokens["admin"])
    exported = client.get("/api/v1/audit?format=csv", headers=admin)
    assert exported.mimetype == "text/csv" and "attachment" in exported.headers["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(exported.get_data(as_text=True))))
    assert [r["action"] for r in table] == ["comment", "acknowledge"]
    assert table[0]["actor"] == "'=cmd|' /C calc'!A0" and table[0]["detail"] == "x,\"y\"\nz"
    assert json.loads(table[1]["after"])["status"] == "acknowledged" and table[1]["source_ip"] == "10.0.0.2"
    as_json = json.loads(client.get("/api/v1/audit?format=json&actor=bob", headers=admin).get_data(as_text=True))
    assert [(r["actor"], r["action"], r["before"]["status"]) for r in as_json] == [("bob", "acknowledge", "open")]


def test_export_streams_past_one_chunk(core):
    now = datetime.now(UTC)
    with core.database.session() as session:
        for n in range(audit.EXPORT_CHUNK + 3):
            audit.record(session, at=now, actor="bulk", action="comment", target_id=n)
    with core.database.session(readonly=True) as session:
        lines = "".join(audit.export_csv(audit.iter_audit(session, AuditFilter(actor="bulk")))).splitlines()
    assert len(lines) == audit.EXPORT_CHUNK + 4  # header + every row


def test_retention_keeps_evidence_unprocessed_violations_and_audit(core):
    events = [_frag("ev-cited"), _frag("ev-old"), _frag("ev-unprocessed"), _frag("ev-recent")]
    vid = seed_violation(core.database, events[:1]).id
    with core.database.session() as session:
        repository.store_events(session, events[1:], now=NOW)
        session.execute(update(EventRow).values(processed_at=NOW))
        session.execute(update(EventRow).where(EventRow.id == "ev-unprocessed").values(processed_at=None))
        session.execute(update(EventRow).where(EventRow.id == "ev-recent")
                        .values(received_at=NOW + timedelta(days=40)))
    core.lifecycle.comment(vid, actor="alice", comment="kept")
    assert core.run_retention(now=NOW + timedelta(days=45)) == 1
    with core.database.session(readonly=True) as session:
        left = set(session.scalars(select(EventRow.id)))
        audit_rows = session.scalar(select(func.count()).select_from(AuditRow))
    assert left == {"ev-cited", "ev-unprocessed", "ev-recent"}
    assert audit_rows == 1
    with core.database.session(readonly=True) as session:
        kept = repository.get_violation(session, vid)
    assert [e.id for e in kept.evidence] == ["ev-cited"]
    assert core.run_retention(now=NOW + timedelta(days=45)) == 0
    assert core.scheduler.get_job("retention") is not None
