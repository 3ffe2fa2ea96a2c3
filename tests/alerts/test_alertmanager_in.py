"""Alertmanager's webhook posted to /api/v1/integrations/alertmanager: events, idempotency, mappings, times —
against a live server on both databases, and end to end from a real Alertmanager."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alertmanager_support import ALERTMANAGER_NEEDED
from live_server import open_and_serve

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.external_alerts import convert, parse_rfc3339
from gpuslo.engine.store import repository
from gpuslo.engine.store.read_models import EventFilter, ViolationFilter

RULES = Path(__file__).resolve().parents[2] / "rules"


def _alert(**overrides: Any) -> dict[str, Any]:
    alert = {"status": "firing", "startsAt": "2026-11-29T12:00:00.123456789Z", "endsAt": "0001-01-01T00:00:00Z",
             "fingerprint": "c0ffee0123456789", "generatorURL": "http://prometheus:9090/graph?g0.expr=x",
             "labels": {"alertname": "GpuXidErrors", "__name__": "DCGM_FI_DEV_XID_ERRORS", "gpu": "3",
                        "UUID": "GPU-0a1b", "Hostname": "gpu-node-7", "severity": "critical"},
             "annotations": {"summary": "Xid error on gpu-node-7 GPU 3", "value": "79"}}
    alert.update(overrides)
    return alert


def _webhook(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="GpuXidErrors"}', "status": "firing", "receiver": "gpuslo",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093",
            "truncatedAlerts": 0, "alerts": list(alerts)}


def test_rfc3339_in_any_form_becomes_utc_microseconds() -> None:
    assert parse_rfc3339("2026-11-29T12:00:00.123456789Z").isoformat() == "2026-11-29T12:00:00.123456+00:00"
    assert parse_rfc3339("2026-11-29T14:00:00.5+02:00").isoformat() == "2026-11-29T12:00:00.500000+00:00"
    assert parse_rfc3339("2026-11-29T12:00:00Z").isoformat() == "2026-11-29T12:00:00+00:00"
    assert parse_rfc3339("2026-11-29") is None and parse_rfc3339(12) is None
    assert parse_rfc3339("2026-13-29T12:00:00Z") is None


def test_a_dcgm_xid_alert_becomes_an_external_alert_and_a_gpu_xid() -> None:
    converted = convert(_webhook(_alert()))
    assert converted.problems == ()
    external, xid = converted.events
    assert external["kind"] == "external_alert" and external["host"] == "gpu-node-7" and external["gpu"] == 3
    assert external["time"] == "2026-11-29T12:00:00.123456Z" and external["gpu_uuid"] == "GPU-0a1b"
    assert external["attrs"]["starts_at"] == "2026-11-29T12:00:00.123456789Z"  # the original, as written
    assert external["labels"]["alertname"] == "GpuXidErrors"
    assert xid["kind"] == "gpu_xid" and xid["attrs"]["xid"] == 79 and xid["id"] != external["id"]


def test_bad_alerts_are_problems_with_their_path_and_the_others_still_convert() -> None:
    converted = convert(_webhook(_alert(status="pending"), _alert(fingerprint="zz"), _alert(startsAt="yesterday"),
                                 "text", _alert(fingerprint="ab12")))
    assert [p.path for p in converted.problems] == ["alerts[0].status", "alerts[1].fingerprint",
                                                    "alerts[2].startsAt", "alerts[3]"]
    assert len(converted.events) == 2
    assert convert({"version": "3", "alerts": []}).problems[0].path == "version"
    assert convert([1, 2]).problems[0].path == "alerts"


@pytest.fixture
def served(database, tmp_path: Path) -> Iterator[tuple[str, Gpuslo]]:
    with open_and_serve(Settings(database_url=database.url, rules_dir=RULES)) as served:
        yield served


def test_webhook_posts_are_idempotent_and_feed_the_rules(served) -> None:
    url, core = served
    endpoint = f"{url}/api/v1/integrations/alertmanager"
    first = httpx.post(endpoint, json=_webhook(_alert()), timeout=10)
    assert first.status_code == 200 and first.json()["accepted"] == 2, first.text
    again = httpx.post(endpoint, json=_webhook(_alert()), timeout=10)  # Alertmanager repeats the group
    assert again.json()["accepted"] == 0 and again.json()["duplicate"] == 2
    resolved = httpx.post(endpoint, json=_webhook(_alert(status="resolved", endsAt="2026-11-29T12:05:00+00:00")),
                          timeout=10)
    assert resolved.json()["accepted"] == 1  # the resolve is its own event; no second gpu_xid
    assert core.wait_idle()
    with core.database.session(readonly=True) as session:
        events = repository.list_events(session, EventFilter(host="gpu-node-7"), page=1, page_size=50).items
        violations = repository.list_violations(session, ViolationFilter(rule_id="xid-fallen-off-bus")).items
    assert sorted(e.event.kind for e in events) == ["external_alert", "external_alert", "gpu_xid"]
    assert len(violations) == 1 and violations[0].gpu == 3  # the shipped Xid 79 rule fired on the mapped event


def test_a_malformed_webhook_is_a_422_naming_the_field(served) -> None:
    url, _ = served
    endpoint = f"{url}/api/v1/integrations/alertmanager"
    answer = httpx.post(endpoint, json={"version": "4", "alerts": [_alert(startsAt="now")]}, timeout=10)
    assert answer.status_code == 422 and answer.json()["error"]["details"][0]["field"] == "alerts[0].startsAt"
    assert httpx.post(endpoint, content=b"x", headers={"Content-Type": "text/plain"}, timeout=10).status_code == 415


@ALERTMANAGER_NEEDED
def test_a_real_alertmanager_delivers_its_alerts_into_gpuslo(served, alertmanager) -> None:
    url, core = served
    am = alertmanager(f"{url}/api/v1/integrations/alertmanager")
    now = time.strftime("%Y-%m-%dT%H:%M:%S.123456789Z", time.gmtime())
    posted = httpx.post(f"{am}/api/v2/alerts", timeout=5, json=[{
        "labels": {"alertname": "DCGM_FI_DEV_XID_ERRORS", "Hostname": "gpu-node-9", "gpu": "1", "xid": "48"},
        "annotations": {"summary": "Xid 48"}, "startsAt": now}])
    assert posted.status_code == 200, posted.text
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with core.database.session(readonly=True) as session:
            events = repository.list_events(session, EventFilter(host="gpu-node-9"), page=1, page_size=50).items
        if len(events) >= 2:
            break
        time.sleep(0.2)
    kinds = sorted(e.event.kind for e in events)
    assert kinds == ["external_alert", "gpu_xid"], kinds
    xid = next(e.event for e in events if e.event.kind == "gpu_xid")
    assert xid.attrs["xid"] == 48 and xid.gpu == 1
    external = next(e.event for e in events if e.event.kind == "external_alert")
    assert len(external.attrs["fingerprint"]) == 16  # Alertmanager's own fingerprint
