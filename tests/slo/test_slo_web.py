"""The recorded H200 token run replayed into a real core (SQLite and PostgreSQL): GET /api/v1/slos[/<id>] in
the documented shape with the figures brute force gives, the /slos pages, the budget on a violation's page and
the gpuslo_slo_* metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.web import create_app

ROOT = Path(__file__).resolve().parents[2]

RECORDING = ROOT / "examples" / "incidents" / "h200-token-requests.jsonl"
LOOPBACK = {"REMOTE_ADDR": "127.0.0.1"}


@pytest.fixture
def replayed(database):
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=ROOT / "rules", rules_poll_seconds=0))
    items = [json.loads(line) for line in RECORDING.read_text().splitlines()]
    core.ingest(items)
    assert core.wait_idle(30)
    yield core, items, create_app(core.settings, core=core).test_client()
    core.close()


def test_api_lists_every_group_with_brute_force_figures(replayed):
    core, items, client = replayed
    body = client.get("/api/v1/slos", environ_base=LOOPBACK).get_json()
    by_slo = {item["slo"]: item for item in body["items"]}
    assert set(by_slo) == {"token-latency", "first-token-latency", "stream-success"}
    itl = by_slo["token-latency"]
    assert list(itl) == ["id", "slo", "service", "objective", "description", "window_s", "calendar", "group", "good",
                         "total", "error_budget_remaining", "burn_rates", "exhaustion_s", "as_of"]
    requests = [i for i in items if i["kind"] == "token_latency" and i["attrs"].get("tokens", 0) > 0]
    slow = [i for i in requests if i["attrs"]["itl_max_ms"] >= 200]
    assert (itl["good"], itl["total"]) == (len(requests) - len(slow), len(requests))
    assert itl["group"] == {"endpoint": "http://127.0.0.1:8000/v1/completions"}
    assert set(itl["burn_rates"]) == {"5m", "30m", "1h", "6h", "1d", "3d"}
    # The whole run lasted under 3 minutes: every lookback from 5m up holds all of it.
    assert itl["burn_rates"]["5m"] == round(len(slow) / len(requests) / 0.01, 4)
    assert itl["error_budget_remaining"] == round(1 - len(slow) / (0.01 * len(requests)), 4)
    assert itl["exhaustion_s"] == 0
    ended = [i for i in items if i["kind"] == "token_request" and i["attrs"]["phase"] in ("done", "error")]
    assert by_slo["stream-success"]["total"] == len(ended)


def test_detail_names_the_causes(replayed):
    core, _items, client = replayed
    (itl,) = [g for g in core.slos.groups() if g.sli.slo_id == "token-latency"]
    body = client.get(f"/api/v1/slos/{itl.id}", environ_base=LOOPBACK).get_json()
    rules = {c["rule_id"] for c in body["causes"]}
    assert {"fragmentation-high", "fragmentation-then-stall", "token-stall"} <= rules
    assert not any(r.endswith(("-burn-page", "-burn-ticket")) for r in rules)  # burn alerts are no cause
    for cause in body["causes"]:
        assert set(cause) == {"rule_id", "violation_id", "group_key", "bad", "share", "stall_layer", "stall_cluster"}
        assert cause["share"] == round(cause["bad"] / (0.01 * body["total"]), 4)
    stalls = {c["rule_id"]: c["stall_layer"] for c in body["causes"] if c["stall_layer"]}
    # the example's stalls carry no attribution, so no cause has a stall cause (test_slo_store checks those that do)
    assert stalls == {}
    assert {s["stall_cause"] for s in body["by_stall_cause"]} == {f"{v} (dominant layer)" for v in stalls.values()}
    assert body["unattributed"] == 0.0  # fragmentation was open on vm GPU 0 before the first slow request
    assert client.get("/api/v1/slos/nope", environ_base=LOOPBACK).status_code == 404


def test_pages_and_metrics(replayed):
    core, _items, client = replayed
    (itl,) = [g for g in core.slos.groups() if g.sli.slo_id == "token-latency"]
    listing = client.get("/slos", environ_base=LOOPBACK).get_data(as_text=True)
    assert "<meter" in listing and "token-latency-burn-page" in listing and "fragmentation-high" in listing
    detail = client.get(f"/slos/{itl.id}", environ_base=LOOPBACK).get_data(as_text=True)
    assert '<svg id="burn-chart"' in detail and "<polyline" in detail and 'id="unattributed"' in detail
    # The CSP allows neither inline styles nor inline scripts: only scripts from /static and JSON data blocks.
    scripts = re.findall(r"<script([^>]*)>", detail)
    assert "style=" not in detail and all('src="/static/' in a or 'type="application/json"' in a for a in scripts)
    cause = core.slos.group(itl.id).causes[0]
    page = client.get(f"/violations/{cause.violation_id}", environ_base=LOOPBACK).get_data(as_text=True)
    assert 'id="budget-cost"' in page and f"{cause.bad} bad requests" in page
    metrics = client.get("/metrics", environ_base=LOOPBACK).get_data(as_text=True)
    assert f'gpuslo_slo_burn_rate{{slo="token-latency",window="1h"}} {itl.burn_rates()["1h"]}' in metrics
    assert 'gpuslo_slo_error_budget_remaining_ratio{slo="stream-success"} 1.0' in metrics
    assert f'gpuslo_slo_events_total{{good="false",slo="token-latency"}} {float(itl.total - itl.good)}' in metrics
