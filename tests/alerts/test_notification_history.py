"""A violation's history tells when delivery of one of its notifications gave up and who sent it again: driven
through the real DeliveryWorker against failing HTTP receivers on 127.0.0.1, and the real API, on both databases."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from gpuslo.engine.alerts import DeliveryPolicy, DeliveryWorker, enqueue_for_match, load_alerts_text
from gpuslo.engine.alerts.transport import Outcome
from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.store import outbox, repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import HistoryEntry
from gpuslo.web import create_app

LOCAL = "allow_private_network: true, allow_http: true"  # the receivers here listen on 127.0.0.1
PD_KEY = "pd-routing-key-0123456789abcdef"
URL = "https://gpuslo.example"
POLICY = DeliveryPolicy(timeout_s=0.3, per_receiver=5, lease_s=5.0, base_delay_s=1.0, max_delay_s=60.0, max_attempts=4)
# The receiver echoes the routing key and a URL with a token: neither may reach the history.
ECHO = '{"error": "routing key ' + PD_KEY + ' rejected, see https://status.example/incidents/7?token=t0k3n"}'
REFUSED = Outcome("dead", 3, 400, "HTTP 400: no")
SHOWN = 'HTTP 503: {"error": "routing key *** rejected, see https://status.example/***"}'


def alerts_yaml(server_url: str) -> str:
    return (f'receivers:\n  - {{name: pagerduty-main, type: pagerduty, {LOCAL}, routing_key: "env:GPUSLO_TEST_PD",'
            f' url: "{server_url}/v2/enqueue"}}\n  - {{name: hook, type: webhook, {LOCAL}, url: "{server_url}/h"}}\n'
            "routes:\n  - {receivers: [pagerduty-main]}\n")


def notification_lines(database: Database, violation_id: int) -> list[HistoryEntry]:
    with database.session(readonly=True) as session:
        detail = repository.get_violation(session, violation_id)
    assert detail is not None
    return [h for h in detail.history if h.action.startswith("notification_")]


def drive(worker: DeliveryWorker, clock: Any, runs: int) -> list[datetime]:
    """`runs` deliveries, the clock moved past the back-off after each; when each ran."""
    times = []
    try:
        for _ in range(runs):
            times.append(clock())
            assert worker.run_once() == 1
            clock.advance(120)
    finally:
        worker.close()
    return times


def test_a_notification_that_runs_out_of_retries_is_in_the_history_with_its_error_redacted(
        database, record, clock, receiver_server):
    server = receiver_server()
    server.script.extend([("status", 503, {}, ECHO)] * POLICY.max_attempts)
    config = load_alerts_text(alerts_yaml(server.url), "alerts.yaml", {"GPUSLO_TEST_PD": PD_KEY})
    _, view = record(database, enqueue=lambda s, v: enqueue_for_match(s, v, config=config, public_url=URL,
                                                                     now=clock()))
    worker = DeliveryWorker(database, config, POLICY, clock=clock)
    times = drive(worker, clock, POLICY.max_attempts - 1)
    assert notification_lines(database, view.id) == []  # retries on the way are not history
    times += drive(DeliveryWorker(database, config, POLICY, clock=clock), clock, 1)

    with database.session(readonly=True) as session:
        (dead,) = outbox.list_notifications(session, violation_id=view.id)
        attempts = outbox.list_attempts(session, [dead.id])
    assert dead.status == "dead" and len(server.requests) == POLICY.max_attempts
    (line,) = notification_lines(database, view.id)
    assert (line.action, line.actor, line.at, line.status_before, line.status_after) == (
        "notification_dead", "engine", times[-1], None, None)
    assert dict(line.detail) == {"notification_id": dead.id, "receiver": "pagerduty-main",
                                 "notification_action": "trigger", "attempts": POLICY.max_attempts,
                                 "response_code": 503, "error": SHOWN}
    assert PD_KEY in server.requests[0].body.decode()  # it was sent, so the receiver could echo it
    assert PD_KEY not in attempts[-1].error and "***" in attempts[-1].error


def test_a_4xx_gives_up_at_once_and_a_receiver_removed_from_the_config_too(database, record, clock,
                                                                           receiver_server):
    server = receiver_server()
    server.script.append(("status", 400, {}, "invalid routing key " + PD_KEY))
    config = load_alerts_text(alerts_yaml(server.url), "alerts.yaml", {"GPUSLO_TEST_PD": PD_KEY})
    _, refused = record(database, enqueue=lambda s, v: enqueue_for_match(s, v, config=config, public_url=URL,
                                                                        now=clock()))
    drive(DeliveryWorker(database, config, POLICY, clock=clock), clock, 1)
    (line,) = notification_lines(database, refused.id)
    assert (line.detail["attempts"], line.detail["response_code"], line.detail["error"]) == (
        1, 400, "HTTP 400: invalid routing key ***")

    _, orphan = record(database, host="node-b", enqueue=lambda s, v: enqueue_for_match(
        s, v, config=config, public_url=URL, now=clock()))
    without = load_alerts_text(alerts_yaml(server.url).replace("pagerduty-main", "pagerduty-new"), "alerts.yaml",
                               {"GPUSLO_TEST_PD": PD_KEY})
    drive(DeliveryWorker(database, without, POLICY, clock=clock), clock, 1)
    (line,) = notification_lines(database, orphan.id)
    assert (line.detail["receiver"], line.detail["response_code"], line.detail["error"]) == (
        "pagerduty-main", None, "receiver 'pagerduty-main' is not configured any more")


def test_a_lease_lost_to_another_worker_writes_no_dead_line(database, record, clock):
    config = load_alerts_text(alerts_yaml("http://127.0.0.1:9"), "alerts.yaml", {"GPUSLO_TEST_PD": PD_KEY})
    _, view = record(database, enqueue=lambda s, v: enqueue_for_match(s, v, config=config, public_url=URL,
                                                                     now=clock()))
    with database.session() as session:
        (first,) = outbox.claim(session, clock(), lease_s=5, limit=1)
    with database.session() as session:  # the lease ran out: a second worker holds the row now
        (second,) = outbox.claim(session, clock() + timedelta(seconds=6), lease_s=5, limit=1)
    worker = DeliveryWorker(database, config, POLICY, clock=clock)
    try:
        worker._finish(first, REFUSED)  # the first worker's late verdict: the row is not its own any more
        assert notification_lines(database, view.id) == []
        worker._finish(second, REFUSED)
    finally:
        worker.close()
    assert [h.detail["attempts"] for h in notification_lines(database, view.id)] == [2]


# ---- the retry through the API ------------------------------------------------------------------------


@pytest.fixture
def server(receiver_server) -> Any:
    return receiver_server()


@pytest.fixture
def core(database: Database, tmp_path: Path, server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gpuslo]:
    """The real core wired from an alerts.yaml, its scheduler left stopped: the test drives delivery itself."""
    monkeypatch.setenv("GPUSLO_TEST_PD", PD_KEY)
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(alerts_yaml(server.url), encoding="utf-8")
    (tmp_path / "rules").mkdir()
    made = Gpuslo(Settings(database_url=database.url, rules_dir=tmp_path / "rules", alerts_config=alerts,
                           public_url=URL), database, Metrics())
    yield made
    made.close()


def _row(html: str, action: str) -> str:
    rows = re.findall(rf'<tr class="history-row" data-action="{action}">(.*?)</tr>', html, re.S)
    assert len(rows) == 1, f"{len(rows)} {action} rows on the page"
    return " ".join(unescape(re.sub(r"<[^>]+>", "", rows[0])).split())


def test_a_retry_through_the_api_is_in_the_history_with_who_did_it(core, server, record, clock):
    database = core.database
    server.script.extend([("status", 503, {}, ECHO)] * POLICY.max_attempts)
    clock.now = datetime.now(UTC) - timedelta(hours=1)  # the retry happens at the real now, after all this
    _, view = record(database, now=clock(), enqueue=lambda s, v: enqueue_for_match(
        s, v, config=core.alerts, public_url=URL, now=clock()))
    drive(DeliveryWorker(database, core.alerts, POLICY, clock=clock), clock, POLICY.max_attempts)
    with database.session(readonly=True) as session:
        (dead,) = outbox.list_notifications(session, violation_id=view.id)
    client = create_app(core.settings, core=core).test_client()

    answer = client.post(f"/api/v1/notifications/{dead.id}/retry", json={"actor": "alice"})
    assert answer.status_code == 200 and answer.get_json()["status"] == "pending"
    assert client.post(f"/api/v1/notifications/{dead.id}/retry", json={"actor": "bob"}).status_code == 409

    history = client.get(f"/api/v1/violations/{view.id}").get_json()["history"]
    assert [h["action"] for h in history] == ["created", "notification_dead", "notification_retried"]
    shown = client.get(f"/api/v1/violations/{view.id}/notifications").get_json()["items"][0]
    assert history[1]["detail"]["error"] == shown["delivery_attempts"][-1]["error"] == SHOWN
    retried = history[2]
    assert (retried["actor"], retried["source"], retried["status_before"], retried["status_after"]) == (
        "alice", "127.0.0.1", None, None)
    assert retried["detail"] == {"notification_id": dead.id, "receiver": "pagerduty-main",
                                 "notification_action": "trigger", "attempts": POLICY.max_attempts}

    html = client.get(f"/violations/{view.id}").get_data(as_text=True)
    assert PD_KEY not in html and "t0k3n" not in html
    assert _row(html, "notification_dead").endswith(
        f"notification dead engine trigger notification {dead.id} to pagerduty-main dead after 4 attempts: {SHOWN}")
    assert _row(html, "notification_retried").endswith(
        f"notification retried alice from 127.0.0.1 trigger notification {dead.id} to pagerduty-main sent again "
        "(it had died after 4 attempts)")
    assert f'href="#notification-{dead.id}"' in html

    clock.now = datetime.now(UTC)
    drive(DeliveryWorker(database, core.alerts, POLICY, clock=clock), clock, 1)  # the receiver is back: 200
    with database.session(readonly=True) as session:
        assert outbox.list_notifications(session, violation_id=view.id)[0].status == "delivered"
    assert [h["action"] for h in client.get(f"/api/v1/violations/{view.id}").get_json()["history"]] == [
        "created", "notification_dead", "notification_retried"]
