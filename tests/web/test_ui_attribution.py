"""A stall with its attribution, from the H200 recording through the real rules and store, on the violation page:
the stacked bar (inline SVG, no script or style) and each share with its evidence."""

from __future__ import annotations

import json
import re
from pathlib import Path

from web_support import RULES_DIR

from gpuslo.engine.events import parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.store import repository, violations

RECORDING = Path(__file__).resolve().parents[2] / "examples" / "incidents" / "h200-stall-attribution.jsonl"


def no_inline_code(html: str) -> bool:
    """The CSP allows no inline style or script: scripts come from /static, data blocks are JSON that never runs."""
    scripts = re.findall(r"<script([^>]*)>", html)
    return "style=" not in html and all('src="/static/' in a or 'type="application/json"' in a for a in scripts)


def _stored_match(core, injected: str):
    stall = next(parse_event(json.loads(line)) for line in RECORDING.read_text().splitlines()
                 if f'"injected":"{injected}"' in line and '"attribution.dominant"' in line)
    rulebooks, _ = load_directory(RULES_DIR)
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    match = next(m for m in evaluator.evaluate([stall]) if m.rule_id.startswith("stall-"))
    with core.database.session() as session:
        repository.store_events(session, [stall], now=stall.time)
        view = violations.record_match(session, match, now=stall.time)
    return stall, view


def test_the_violation_page_draws_the_stall_split_with_its_evidence(client, core):
    stall, view = _stored_match(core, "cpu")
    response = client.get(f"/violations/{view.id}")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    assert response.headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"
    assert no_inline_code(html)
    assert 'id="attribution" class="attribution" data-dominant="scheduler"' in html
    rects = re.findall(r'<rect class="layer layer-(\w+)" x="([\d.]+)" y="0"\s+width="([\d.]+)"', html)
    layers = [r[0] for r in rects]
    assert layers[0] == "network" or layers[0] == "scheduler"
    assert "scheduler" in layers and "compute" in layers  # the engine thread's own work: its own segment
    widths = {layer: float(w) for layer, _, w in rects}
    gap = stall.attrs["gap_ms"]
    assert abs(widths["scheduler"] - stall.attrs["attribution.scheduler_ms"] / gap * 1000) < 0.01
    assert abs(sum(widths.values()) - 1000) < 0.1  # the shares fill the bar
    assert re.search(r'data-layer="scheduler">.*?runnable \d+ ms while', html, re.S)
    detail = client.get(f"/api/v1/violations/{view.id}").get_json()
    assert detail["explanation"]["attribution"]["dominant"] == "scheduler"
    assert detail["explanation"]["attribution"]["event_id"] == stall.id


def test_the_stall_causes_page_lists_the_clusters_and_plots_the_stalls(client, core):
    events = [parse_event(json.loads(line)) for line in RECORDING.read_text().splitlines() if line.strip()]
    with core.database.session() as session:
        repository.store_events(session, events, now=events[-1].time)
    core.stall_causes.run(now=events[-1].time)  # what the periodic job does
    response = client.get("/stalls")
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and no_inline_code(html)
    rows = re.findall(r'<tr class="stall-cluster" id="cluster-([\w-]+)"', html)
    assert rows == ["cpu-starvation", "gpu-busy", "kernel-io", "network-delay", "allocator-flush", "noise"]
    assert re.search(r'id="cluster-cpu-starvation".*?class="count">25<.*?32\.1 %', html, re.S)
    assert len(re.findall(r'<circle class="point layer-', html)) == 90
    assert 'id="nav-stalls"' in html
    api = client.get("/api/v1/stalls/clusters").get_json()
    assert [c["id"] for c in api["clusters"]][:1] == ["cpu-starvation"] and len(api["labels"]) == 90


def test_no_stalls_is_said_plainly(client):
    html = client.get("/stalls").get_data(as_text=True)
    assert 'id="no-stall-clusters"' in html
