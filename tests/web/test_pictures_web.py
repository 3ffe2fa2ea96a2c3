"""Search, chart pages and their JSON data blocks, human units and HTTP metrics on the real core (SQLite and
PostgreSQL)."""

from __future__ import annotations

import json
import re
from html import unescape
from typing import Any

from web_support import assert_no_inline_code, seed_violation

from gpuslo.engine.events import parse_event
from gpuslo.web.display import human_bytes, human_seconds, humane_text


def _frag(event_id: str, host: str = "node-1", **attrs: Any):
    return parse_event({"id": event_id, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": host,
                        "gpu": 0, "attrs": {"fragmentation_ratio": 0.71, **attrs}})


def _page(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)[:800]
    html = response.get_data(as_text=True)
    assert_no_inline_code(html)
    return html


def _rules(html: str) -> list[str]:
    return re.findall(r'class="violation-row" id="violation-\d+" data-rule="([^"]+)"', html)


def _data_block(html: str, block_id: str) -> Any:
    found = re.search(rf'<script type="application/json" id="{block_id}">(.*?)</script>', html, re.DOTALL)
    assert found, f"no data block {block_id}"
    return json.loads(found.group(1))


def test_host_and_rule_match_exactly_or_by_prefix_and_q_by_substring(client, core):
    seed_violation(core.database, [_frag("a", host="bulk-07")], rule_id="frag-high", summary="Allocator 71%_full")
    seed_violation(core.database, [_frag("b", host="gpu-node-1")], rule_id="token-stall",
                   summary="Token stall of 400 ms")
    assert _rules(_page(client, "/violations?host=bulk*")) == ["frag-high"]
    assert _rules(_page(client, "/violations?host=bulk")) == []  # without the star: the exact name
    assert _rules(_page(client, "/violations?host=node*")) == []  # a prefix, not a substring
    assert _rules(_page(client, "/violations?rule=token*")) == ["token-stall"]
    assert _rules(_page(client, "/violations?rule=token-stall")) == ["token-stall"]
    assert _rules(_page(client, "/violations?rule=token-")) == []
    assert _rules(_page(client, "/violations?q=bulk")) == ["frag-high"]  # free text finds a part of a name
    assert _rules(_page(client, "/violations?q=STALL")) == ["token-stall"]  # any case, in the summary
    assert _rules(_page(client, "/violations?q=node-1")) == ["token-stall"]  # a substring of the host
    assert _rules(_page(client, "/violations?q=71%25_")) == ["frag-high"]  # % and _ match themselves
    assert _rules(_page(client, "/violations?q=7_%25")) == []
    assert _rules(_page(client, "/violations?q=" + "x" * 600)) == []  # long free text is cut, not refused
    weird = client.get("/api/v1/violations", query_string={"q": "'; DROP TABLE violations; -- <b>\\"})
    assert weird.status_code == 200 and weird.get_json()["items"] == []
    assert [v["rule_id"] for v in client.get("/api/v1/violations?q=bulk").get_json()["items"]] == ["frag-high"]


def test_violations_over_time_by_severity_data_block(client, core):
    seed_violation(core.database, [_frag("a")], severity="critical", rule_id="r1")
    seed_violation(core.database, [_frag("b", host="node-2")], severity="warning", rule_id="r2")
    html = _page(client, "/violations")
    data = _data_block(html, "data-violations-over-time")
    assert data["series"] == {"critical": [1], "warning": [1]} and len(data["bins"]) == 1
    assert 'src="/static/vendor/echarts/echarts.min.js"' in html and 'src="/static/charts.js"' in html
    empty = _page(client, "/violations?host=nobody")
    assert "data-violations-over-time" not in empty and "echarts" not in empty  # no chart, no library


def _tokens(core) -> None:
    base = {"host": "node-1", "gpu": 0, "source": "t"}
    events = [{**base, "id": f"tl-{i}", "kind": "token_latency", "time": f"2025-01-01T00:00:{i:02d}Z",
               "attrs": {"endpoint": "/v1", "model": "m", "itl_p50_ms": 30, "itl_p99_ms": 90, "itl_max_ms": 120}}
              for i in range(0, 50, 10)]
    events.append({**base, "id": "st-1", "kind": "token_stall", "time": "2025-01-01T00:00:21Z",
                   "attrs": {"endpoint": "/v1", "model": "m", "gap_ms": 800, "token_index": 3}})
    events.append({**base, "id": "other-model", "kind": "token_latency", "time": "2025-01-01T00:00:05Z",
                   "attrs": {"endpoint": "/v1", "model": "m2", "itl_p50_ms": 20, "itl_p99_ms": 30, "itl_max_ms": 40}})
    report = core.ingest(events)
    assert all(r.status == "accepted" for r in report.results)


def test_token_heatmap_per_series_counts_reported_gaps(client, core):
    _tokens(core)
    html = _page(client, "/charts/tokens")
    first, second = _data_block(html, "data-token-heatmap-1"), _data_block(html, "data-token-heatmap-2")
    assert sum(n for _, _, n in first["cells"]) == 5 * 3 + 1  # three gaps per window and the stall
    assert sum(n for _, _, n in second["cells"]) == 3
    assert [(s["id"], first["buckets"][s["bucket"]]) for s in first["stalls"]] == [("st-1", "≤ 1 s")]
    assert first["buckets"][0] == "≤ 10 ms" and first["buckets"][-1] == "> 5 s"
    only = _page(client, "/charts/tokens?model=m2")
    assert "data-token-heatmap-1" in only and "data-token-heatmap-2" not in only
    assert "No token_latency" in _page(client, "/charts/tokens?host=elsewhere")
    bad = client.get("/charts/tokens?gpu=x&colour=red")
    assert bad.status_code == 400 and "gpu" in bad.get_data(as_text=True) and "colour" in bad.get_data(as_text=True)


def test_memory_timeline_with_thresholds_and_markers(client, core):
    base = {"host": "node-9", "gpu": 1, "source": "t"}
    samples = [{**base, "id": f"m-{i}", "kind": "mem_fragmentation", "time": f"2025-01-01T00:00:0{i}Z",
                "attrs": {"scope": "allocator", "fragmentation_ratio": 0.2 * i, "free_bytes": 8 * 2**30,
                          "largest_free_bytes": 2**30, "alloc_retries": i // 2}} for i in range(4)]
    oom = {**base, "id": "oom-1", "kind": "cuda_oom", "time": "2025-01-01T00:00:04Z",
           "attrs": {"api": "cudaMalloc", "requested_bytes": 2 * 2**30}}
    assert all(r.status == "accepted" for r in core.ingest([*samples, oom]).results)
    html = _page(client, "/charts/memory?host=node-9")
    data = _data_block(html, "data-memory-1")
    assert data["thresholds"] == [0.35, 0.65]
    assert [p["fr"] for p in data["points"]] == [0.0, 0.2, 0.4, 0.6000000000000001]
    assert [(m["kind"], m["id"]) for m in data["markers"]] == [("allocator retry", "m-2"), ("OOM", "oom-1")]
    assert "8 GiB" in unescape(html) and 'title="8589934592"' in html  # bytes in human units, raw on hover


def test_human_units_and_times_for_people():
    assert human_bytes(47369262592) == "44.1 GiB" and human_bytes(512) == "512 B"
    assert human_seconds(0.3987) == "399 ms" and human_seconds(75.2) == "1 min 15 s"
    assert human_seconds(0.00004) == "40 µs" and human_seconds(7260) == "2 h 1 min"
    text = str(humane_text("free_bytes = 47369262592 >= 1GiB <b>"))
    assert text == ('free_bytes = <span class="raw" title="47369262592" data-raw="47369262592">44.1 GiB</span>'
                    " &gt;= 1GiB &lt;b&gt;")


def test_violation_page_shows_human_units_and_an_evidence_timeline(client, core):
    view = seed_violation(core.database, [_frag("a", free_bytes=47369262592)])
    html = _page(client, f"/violations/{view.id}")
    assert _data_block(html, "data-evidence-timeline")["kinds"] == ["mem_fragmentation"]
    assert "free_bytes=<span class=\"raw\" title=\"47369262592\"" in html
    assert re.search(r'<time datetime="2025-01-01T00:00:00.000000Z" title="2025-01-01 00:00:00.000000Z">', html)


def test_http_requests_are_counted_by_route(client, core):
    _page(client, "/violations")
    client.get("/no/such/page")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'gpuslo_http_requests_total{code="200",method="GET",route="ui.violations"} 1.0' in text
    assert 'gpuslo_http_requests_total{code="404",method="GET",route="unmatched"} 1.0' in text
    assert 'gpuslo_http_request_duration_seconds_count{method="GET",route="ui.violations"} 1.0' in text


def test_stall_attribution_bars_from_the_attribution_attributes():
    from datetime import UTC, datetime

    from gpuslo.engine.events import Event
    from gpuslo.web.chart_data import stall_attribution

    # Built directly: the attribution probe's attributes are accepted by ingest once its change lands (issue 14).
    at = datetime(2025, 1, 1, tzinfo=UTC)
    stall = Event("s-1", "token_stall", at, "h", attrs={"gap_ms": 300.0, "attribution.network_ms": 200.0,
                                                           "attribution.gpu_ms": 90, "attribution.dominant": "network"})
    plain = Event("s-2", "token_stall", at, "h", attrs={"gap_ms": 250.0})
    assert stall_attribution([plain, _frag("f")]) is None
    data = stall_attribution([stall, plain])
    assert data == {"stalls": [{"id": "s-1", "t": 1735689600000, "gap_ms": 300.0, "dominant": "network"}],
                    "layers": ["network", "gpu"], "series": {"network": [200.0], "gpu": [90.0]}}
