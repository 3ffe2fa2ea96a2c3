"""Delivery against real HTTP receivers on 127.0.0.1 that fail on purpose, on both databases."""

from __future__ import annotations

import base64
import json
import logging
import time
from datetime import timedelta

from sqlalchemy import select

from gpuslo.engine.alerts import (
    DeliveryPolicy,
    DeliveryWorker,
    enqueue_for_match,
    enqueue_for_transition,
    load_alerts_text,
)
from gpuslo.engine.store import outbox
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.outbox_models import DeliveryAttemptRow, NotificationRow

LOCAL = "allow_private_network: true, allow_http: true"  # the receivers here listen on 127.0.0.1

SECRET = "whsec_" + base64.b64encode(b"delivery-test-signing-key").decode()
PD_KEY = "pd-routing-key-0123456789abcdef"
ENV = {"HOOK": SECRET, "PD": PD_KEY}
URL = "https://gpuslo.example"
POLICY = DeliveryPolicy(timeout_s=0.3, per_receiver=5, lease_s=5.0, base_delay_s=1.0, max_delay_s=60.0, max_attempts=4)


def config_for(hook_url: str, pd_url: str | None = None, rate_limit: str = ""):
    pd = (f'  - {{name: pd, type: pagerduty, {LOCAL}, routing_key: "env:PD", url: "{pd_url}/v2/enqueue"}}\n'
          if pd_url else "")
    text = (f'receivers:\n  - {{name: hook, type: webhook, {LOCAL}, url: "{hook_url}/hook", secret: "env:HOOK"'
            f'{rate_limit}}}\n{pd}routes:\n  - {{receivers: [hook{", pd" if pd_url else ""}]}}\n')
    return load_alerts_text(text, "alerts.yaml", ENV)


def setup(database, record, clock, config, count=1):
    views = []
    for i in range(count):
        _, view = record(database, group_key=f"g{i}", enqueue=lambda s, v: enqueue_for_match(
            s, v, config=config, public_url=URL, now=clock()))
        views.append(view)
    return DeliveryWorker(database, config, POLICY, clock=clock), views


def notifications(database: Database):
    with database.session(readonly=True) as session:
        found = outbox.list_notifications(session)
        return found, outbox.list_attempts(session, [n.id for n in found])


def test_500s_then_success_keeps_the_webhook_id_and_a_valid_signature(database, record, clock, receiver_server,
                                                                     verify_standard_webhook):
    server = receiver_server()
    server.script.extend([("status", 500), ("status", 503)])
    worker, _ = setup(database, record, clock, config_for(server.url))
    try:
        for _ in range(3):
            worker.run_once()
            clock.advance(120)
    finally:
        worker.close()
    (row,), attempts = notifications(database)
    assert row.status == "delivered" and row.attempts == 3
    assert [(a.status, a.response_code) for a in attempts] == [("retry", 500), ("retry", 503), ("delivered", 200)]
    ids = {r.headers["webhook-id"] for r in server.requests}
    assert ids == {f"msg_gpuslo_{row.id}"} and len(server.requests) == 3
    assert all(verify_standard_webhook([SECRET], r.headers, r.body) for r in server.requests)


def test_backoff_grows_and_the_retry_is_not_early(database, record, clock, receiver_server):
    server = receiver_server()
    server.script.extend([("status", 500)] * 3)
    worker, _ = setup(database, record, clock, config_for(server.url))
    delays = []
    try:
        for _ in range(3):
            start = clock()
            worker.run_once()
            (row,), _ = notifications(database)
            delays.append((row.next_attempt_at - start).total_seconds())
            clock.now = row.next_attempt_at - timedelta(milliseconds=1)
            assert worker.run_once() == 0  # not due yet
            clock.now = row.next_attempt_at
    finally:
        worker.close()
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0


def test_a_hanging_receiver_times_out_and_is_retried(database, record, clock, receiver_server):
    server = receiver_server()
    server.script.append(("hang", 5))
    worker, _ = setup(database, record, clock, config_for(server.url))
    try:
        started = time.monotonic()
        worker.run_once()
        assert time.monotonic() - started < 2.0
        clock.advance(120)
        worker.run_once()
    finally:
        worker.close()
    (row,), attempts = notifications(database)
    assert [a.status for a in attempts] == ["retry", "delivered"] and "timeout" in attempts[0].error
    assert row.status == "delivered"


def test_refused_connections_retry_then_go_dead_and_can_be_retried(database, record, clock, refused_url,
                                                                    receiver_server):
    worker, _ = setup(database, record, clock, config_for(refused_url))
    try:
        for _ in range(POLICY.max_attempts):
            worker.run_once()
            clock.advance(120)
    finally:
        worker.close()
    (row,), attempts = notifications(database)
    assert row.status == "dead" and [a.status for a in attempts] == ["retry"] * 3 + ["dead"]
    assert all("ConnectError" in a.error and a.response_code is None for a in attempts)
    server = receiver_server()
    with database.session() as session:
        assert outbox.retry_dead(session, row.id, clock())
    worker = DeliveryWorker(database, config_for(server.url), POLICY, clock=clock)
    try:
        worker.run_once()
    finally:
        worker.close()
    assert notifications(database)[0][0].status == "delivered" and len(server.requests) == 1


def test_429_retry_after_is_honoured(database, record, clock, receiver_server):
    server = receiver_server()
    server.script.append(("status", 429, {"Retry-After": "120"}))
    worker, _ = setup(database, record, clock, config_for(server.url))
    try:
        worker.run_once()
        (row,), attempts = notifications(database)
        assert attempts[0].response_code == 429 and row.next_attempt_at >= clock() + timedelta(seconds=120)
        clock.advance(100)
        assert worker.run_once() == 0 and len(server.requests) == 1
        clock.advance(21)
        assert worker.run_once() == 1
    finally:
        worker.close()
    assert notifications(database)[0][0].status == "delivered"


def test_slow_bodies_do_not_hold_the_worker(database, record, clock, receiver_server):
    server = receiver_server()
    server.script.extend([("slow_body", 500, 5), ("slow_body", 200, 5)])
    worker, _ = setup(database, record, clock, config_for(server.url))
    try:
        started = time.monotonic()
        worker.run_once()
        clock.advance(120)
        worker.run_once()
        assert time.monotonic() - started < 3.0
    finally:
        worker.close()
    (row,), attempts = notifications(database)
    assert [(a.status, a.response_code) for a in attempts] == [("retry", 500), ("delivered", 200)]


def test_400_goes_dead_at_once_and_408_is_retried(database, record, clock, receiver_server):
    server = receiver_server()
    server.script.extend([("status", 408), ("status", 400, {}, '{"error":"bad payload"}')])
    worker, _ = setup(database, record, clock, config_for(server.url))
    try:
        worker.run_once()
        clock.advance(120)
        worker.run_once()
        clock.advance(3600)
        assert worker.run_once() == 0
    finally:
        worker.close()
    (row,), attempts = notifications(database)
    assert row.status == "dead" and [(a.status, a.response_code) for a in attempts] == [("retry", 408),
                                                                                        ("dead", 400)]
    assert "bad payload" in attempts[1].error


def test_resolve_is_never_delivered_before_its_trigger(database, record, clock, receiver_server):
    server = receiver_server()
    server.script.extend([("status", 500), ("status", 500)])
    config = config_for(server.url)
    worker, (view,) = setup(database, record, clock, config)
    with database.session() as session:
        enqueue_for_transition(session, view, "resolve", config=config, public_url=URL, now=clock())
    try:
        for _ in range(4):
            worker.run_once()
            clock.advance(120)
    finally:
        worker.close()
    kinds = [r.json()["type"] for r in server.requests]
    assert kinds == ["violation.trigger"] * 3 + ["violation.resolve"]


def test_rate_limit_postpones_without_counting_attempts(database, record, clock, receiver_server):
    server = receiver_server()
    worker, _ = setup(database, record, clock, config_for(server.url, rate_limit=", rate_limit: {per_second: 0.01}"),
                      count=3)
    try:
        worker.run_until_idle(timeout_s=5)
    finally:
        worker.close()
    rows, _ = notifications(database)
    assert len(server.requests) == 1
    assert sorted((r.status, r.attempts) for r in rows) == [("delivered", 1), ("pending", 0), ("pending", 0)]


def test_secrets_never_reach_logs_attempt_rows_or_payloads(database, record, clock, receiver_server, caplog):
    server = receiver_server()
    slack_url = f"{server.url}/services/T000/B000/slack-secret-token"
    server.script.append(("status", 400, {}, json.dumps({"message": f"invalid routing key {PD_KEY}"})))
    server.script.append(("status", 400, {}, json.dumps({"message": f"bad signature {SECRET}"})))
    server.script.append(("status", 404, {}, f"no such hook {slack_url}"))
    text = (f'receivers:\n  - {{name: hook, type: webhook, {LOCAL}, url: "{server.url}/hook", secret: "env:HOOK"}}\n'
            f'  - {{name: pd, type: pagerduty, {LOCAL}, routing_key: "env:PD", url: "{server.url}/v2/enqueue"}}\n'
            '  - {name: slack, type: slack, allow_private_network: true, allow_http: true, url: "env:SLACK"}\n'
            'routes:\n  - {receivers: [hook, pd, slack]}\n')
    config = load_alerts_text(text, "alerts.yaml", {**ENV, "SLACK": slack_url})
    worker, _ = setup(database, record, clock, config)
    caplog.set_level(logging.DEBUG)
    try:
        worker.run_until_idle(timeout_s=5)
    finally:
        worker.close()
    assert len(server.requests) == 3 and any(PD_KEY in r.body.decode() for r in server.requests)
    with database.engine.connect() as connection:
        dump = repr(connection.execute(select(NotificationRow.__table__)).all())
        dump += repr(connection.execute(select(DeliveryAttemptRow.__table__)).all())
    assert "***" in dump and "invalid routing key" in dump
    assert "HTTP Request: POST" in caplog.text  # httpx did log its requests, scrubbed
    for secret in (PD_KEY, SECRET, SECRET.removeprefix("whsec_"), "slack-secret-token"):
        assert secret not in dump and secret not in caplog.text
    assert "notification" in caplog.text
