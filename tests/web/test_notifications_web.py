"""Notifications on the violation page, the /notifications page and the API, and the audited retry of a dead
one; delivered through the real outbox and DeliveryWorker to a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from access_support import CSRF, act_as
from web_support import app_settings, seed_violation

from gpuslo.engine.alerts import DeliveryPolicy, DeliveryWorker, enqueue_for_match
from gpuslo.engine.events import parse_event
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.service import Gpuslo
from gpuslo.engine.store import audit, outbox
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.outbox import Attempt

SLACK_SECRET_PATH = "/dead/services/T000/B000/XyZsecretToken123"
POLICY = DeliveryPolicy(timeout_s=2.0, per_receiver=5, lease_s=60.0)


class Receiver:
    """`/ok` answers 500 once, then 200; every other path is a 400 whose body echoes the path (the secret)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.paths.append(self.path)
                if self.path == "/ok":
                    code = 500 if owner.paths.count("/ok") == 1 else 200
                    body = b"try later" if code == 500 else b"ok"
                else:
                    code, body = 400, f"no such hook: {self.path}".encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def core(database: Database, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The real core wired from an alerts.yaml as `gpuslo serve` wires it, its scheduler left stopped so the
    test drives delivery itself (with a clock it can move past the back-off)."""
    monkeypatch.setenv("GPUSLO_TEST_SLACK_URL", receiver.url + SLACK_SECRET_PATH)
    config = tmp_path / "alerts.yaml"
    local = "allow_http: true, allow_private_network: true"  # the receiver is plain http on loopback
    config.write_text(f'receivers:\n  - {{name: ops-hook, type: webhook, url: "{receiver.url}/ok", {local}}}\n'
                      f'  - {{name: team-slack, type: slack, url: "env:GPUSLO_TEST_SLACK_URL", {local}}}\n'
                      "routes:\n  - {receivers: [ops-hook, team-slack]}\n", encoding="utf-8")
    (tmp_path / "rules").mkdir()
    made = Gpuslo(app_settings(database, tmp_path / "rules", alerts_config=config), database, Metrics())
    yield made
    made.close()


def _frag(event_id: str):
    return parse_event({"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z",
                        "host": "node-1", "gpu": 0, "attrs": {"fragmentation_ratio": 0.71}})


def _deliver(core: Any, receiver: Receiver) -> tuple[int, dict[str, int]]:
    """A violation with a webhook notification (500, then delivered) and a Slack one (400: dead)."""
    view = seed_violation(core.database, [_frag("f-1")])
    now = datetime.now(UTC)
    with core.database.session() as session:
        enqueue_for_match(session, view, config=core.alerts, public_url="https://gpuslo.example", now=now,
                          notice="trigger")
    clock = [now]
    worker = DeliveryWorker(core.database, core.alerts, POLICY, clock=lambda: clock[0])
    try:
        assert worker.run_once() == 2
        clock[0] += timedelta(hours=1)  # past the back-off of the webhook's 500
        assert worker.run_once() == 1
    finally:
        worker.close()
    assert sorted(receiver.paths) == sorted(["/ok", "/ok", SLACK_SECRET_PATH])
    with core.database.session(readonly=True) as session:
        ids = {n.receiver: n.id for n in outbox.list_notifications(session, violation_id=view.id)}
    return view.id, ids


def _tbody(html: str, notification_id: int) -> str:
    found = re.search(rf'<tbody class="notification" id="notification-{notification_id}".*?</table>\s*</td></tr>'
                      rf'|<tbody class="notification" id="notification-{notification_id}".*?</tbody>', html, re.S)
    assert found, f"notification {notification_id} is not on the page"
    return found.group(0)


def _cells(html: str, css_class: str) -> list[str]:
    return [unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(rf'<td class="[^"]*\b{css_class}\b[^"]*">(.*?)</td>', html, re.S)]


def test_an_echoed_part_of_a_secret_url_is_never_stored_or_logged(core, receiver, caplog):
    """The receiver answered 400 echoing the Slack webhook's path: the token must not reach the attempt row."""
    violation_id, ids = _deliver(core, receiver)
    with core.database.session(readonly=True) as session:
        attempts = outbox.list_attempts(session, [ids["team-slack"]])
    assert attempts and all("XyZsecretToken123" not in (a.error or "") for a in attempts)
    assert "XyZsecretToken123" not in caplog.text


def test_violation_page_shows_delivered_and_dead_notifications_with_their_attempts(client, core, receiver):
    violation_id, ids = _deliver(core, receiver)
    html = client.get(f"/violations/{violation_id}").get_data(as_text=True)
    assert SLACK_SECRET_PATH not in html and "XyZsecretToken123" not in html

    hook = _tbody(html, ids["ops-hook"])
    assert 'data-status="delivered"' in hook and _cells(hook, "receiver") == ["ops-hook"]
    assert _cells(hook, "attempt-count") == ["2"]
    assert _cells(hook, "attempt-status") == ["retry", "delivered"]
    assert _cells(hook, "response-code") == ["500", "200"]
    assert _cells(hook, "error") == ["HTTP 500: try later", ""]
    assert all(re.fullmatch(r"\d+ ms", cell) for cell in _cells(hook, "latency"))
    assert _cells(hook, "delivered-at")[0].startswith(str(datetime.now(UTC).year))
    assert "retry-button" not in hook

    slack = _tbody(html, ids["team-slack"])
    assert 'data-status="dead"' in slack
    assert _cells(slack, "attempt-status") == ["dead"] and _cells(slack, "response-code") == ["400"]
    assert _cells(slack, "error") == ["HTTP 400: no such hook: ***"]
    form = re.search(r'<form class="retry-form" method="post" action="([^"]+)">(.*?)</form>', slack, re.S)
    assert form and form.group(1) == f"/notifications/{ids['team-slack']}/retry"
    assert 'name="csrf_token"' in form.group(2) and 'name="return_to" value="violation"' in form.group(2)

    items = client.get(f"/api/v1/violations/{violation_id}/notifications").get_json()["items"]
    assert [(n["receiver"], n["status"], n["attempts"]) for n in items] == [("ops-hook", "delivered", 2),
                                                                           ("team-slack", "dead", 1)]
    assert [a["response_code"] for a in items[0]["delivery_attempts"]] == [500, 200]
    assert items[1]["delivery_attempts"][0]["error"] == "HTTP 400: no such hook: ***"
    assert "payload" not in items[0] and "XyZsecret" not in str(items)
    assert client.get("/api/v1/violations/999/notifications").status_code == 404


def test_retry_from_the_page_moves_dead_to_pending_and_is_audited(client, core, receiver):
    violation_id, ids = _deliver(core, receiver)
    dead = ids["team-slack"]
    act_as(client, None)
    assert client.post(f"/notifications/{dead}/retry", data={"actor": "alice"}).status_code == 403  # no CSRF
    response = client.post(f"/notifications/{dead}/retry",
                           data={"csrf_token": CSRF, "actor": "alice", "return_to": "violation"})
    assert response.status_code == 303
    assert response.headers["Location"].endswith(f"/violations/{violation_id}#notifications")

    with core.database.session(readonly=True) as session:
        again = {n.id: n for n in outbox.list_notifications(session, violation_id=violation_id)}[dead]
        rows = audit.list_audit(session, AuditFilter(action="notification.retry")).items
    assert (again.status, again.attempts, again.lease_until) == ("pending", 0, None)
    assert len(rows) == 1
    row = rows[0]
    assert (row.actor, row.target_type, row.target_id, row.source_ip) == ("alice", "notification", str(dead),
                                                                          "127.0.0.1")
    assert (row.before["status"], row.before["attempts"]) == ("dead", 1)
    assert (row.after["status"], row.after["attempts"]) == ("pending", 0)
    assert row.after["receiver"] == "team-slack"

    html = client.get(f"/violations/{violation_id}").get_data(as_text=True)
    slack = _tbody(html, dead)
    assert 'data-status="pending"' in slack and "retry-button" not in slack
    assert _cells(slack, "attempt-status") == ["dead"]  # the earlier attempt stays listed
    assert _cells(slack, "next-attempt") != [""]


def test_retry_api_409_404_and_no_audit_row_when_refused(client, core, receiver):
    _, ids = _deliver(core, receiver)
    dead, delivered = ids["team-slack"], ids["ops-hook"]
    refused = client.post(f"/api/v1/notifications/{delivered}/retry", json={})
    assert refused.status_code == 409
    assert refused.get_json()["error"] == {
        "status": 409, "code": "invalid_transition", "details": [],
        "message": f"notification {delivered} is delivered, not dead; only a dead notification can be retried"}
    assert client.post("/api/v1/notifications/424242/retry", json={}).get_json()["error"]["code"] == "not_found"

    done = client.post(f"/api/v1/notifications/{dead}/retry", json={"actor": "bob"})
    assert done.status_code == 200
    body = done.get_json()
    assert (body["id"], body["status"], body["attempts"]) == (dead, "pending", 0)
    assert [a["status"] for a in body["delivery_attempts"]] == ["dead"]
    twice = client.post(f"/api/v1/notifications/{dead}/retry", json={})
    assert twice.status_code == 409 and "is pending, not dead" in twice.get_json()["error"]["message"]
    with core.database.session(readonly=True) as session:
        rows = audit.list_audit(session, AuditFilter(action="notification.retry")).items
    assert [(r.actor, r.target_id) for r in rows] == [("bob", str(dead))]


def _hand_made(core: Any) -> tuple[int, int]:
    """Through outbox.enqueue/claim/finish: a dead row whose error holds URL credentials, and a suppressed one."""
    view = seed_violation(core.database, [_frag("f-9")], group_key="host=node-9,gpu=0")
    now = datetime.now(UTC)
    with core.database.session() as session:
        dead = outbox.enqueue(session, violation_id=view.id, receiver="pd-prod", action="trigger",
                              dedup_key="gpuslo-x", payload={}, now=now)
        outbox.enqueue(session, violation_id=view.id, receiver="team-slack", action="trigger",
                       dedup_key="gpuslo-x", payload={}, now=now, suppressed_reason="silenced by silence 4 (amy: "
                                                                                    "maintenance)")
    with core.database.session() as session:
        [claimed] = outbox.claim(session, now, lease_s=60, limit=5)
        error = "ConnectError: http://user:hunter2@10.0.0.1:8080/hook?token=abc123 refused"
        outbox.finish(session, claimed, Attempt("dead", 12, None, error), now)
    return view.id, dead


def test_notifications_page_filters_pages_and_scrubs_urls(client, core, receiver):
    _, delivered = _deliver(core, receiver)
    violation_id, dead = _hand_made(core)
    html = client.get("/notifications").get_data(as_text=True)  # dead letters by default
    shown = re.findall(r'<tbody class="notification" id="notification-(\d+)" data-status="(\w+)"', html)
    assert shown == [(str(dead), "dead"), (str(delivered["team-slack"]), "dead")]  # newest first
    assert "hunter2" not in html and "abc123" not in html
    assert "ConnectError: http://10.0.0.1:8080/*** refused" in unescape(html)
    assert 'name="return_to" value="list"' in html

    every = client.get("/notifications?status=all&page_size=50").get_data(as_text=True)
    assert set(re.findall(r'<tbody class="notification" id="notification-\d+" data-status="(\w+)"', every)) == {
        "dead", "delivered", "suppressed"}
    assert "silenced by silence 4 (amy: maintenance)" in unescape(every)
    assert f'href="/violations/{violation_id}"' in every

    slack = client.get("/notifications?status=all&receiver=team-slack&page_size=50").get_data(as_text=True)
    assert set(_cells(slack, "receiver")) == {"team-slack"} and len(_cells(slack, "receiver")) == 2
    first = client.get("/notifications?status=all&page_size=1").get_data(as_text=True)
    assert len(_cells(first, "receiver")) == 1 and 'id="page-next"' in first and "4 in all" in first
    assert client.get("/notifications?status=lost").status_code == 400

    listed = client.get("/api/v1/notifications?status=dead&receiver=pd-prod").get_json()
    assert [n["id"] for n in listed["items"]] == [dead] and listed["total"] == 1
    assert listed["items"][0]["delivery_attempts"][0]["error"] == ("ConnectError: http://10.0.0.1:8080/*** "
                                                                    "refused")
    everything = client.get("/api/v1/notifications?page_size=2").get_json()
    assert (everything["total"], len(everything["items"]), everything["has_next"]) == (4, 2, True)
    assert [n["id"] for n in everything["items"]] == sorted((n["id"] for n in everything["items"]), reverse=True)
    bad = client.get("/api/v1/notifications?colour=red").get_json()["error"]
    assert bad["code"] == "bad_query" and bad["details"][0]["param"] == "colour"
