"""Generate the Grafana dashboards in this folder from code: `python dashboards/generate.py` writes them,
`--check` fails when a committed JSON file differs from what this script makes (the test suite runs the check).

Every panel queries gpuslo's /metrics families (docs/api.md); every dashboard has a Prometheus datasource variable,
and the token and fragmentation dashboards have host/GPU(/endpoint/model) variables. Stdlib only: the JSON model
is small and stable (schemaVersion 39, Grafana 10/11), and a generator in plain Python keeps it readable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
TOKEN_SELECTOR = 'host=~"$host", gpu=~"$gpu", endpoint=~"$endpoint", model=~"$model"'
GPU_SELECTOR = 'host=~"$host", gpu=~"$gpu"'


# ---- building blocks --------------------------------------------------------------------------------------

def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []}


def label_variable(name: str, label: str, metric: str, title: str, parent: str = "") -> dict[str, Any]:
    """A multi-value variable over the values of `label` on `metric` (narrowed by `parent` when given)."""
    selector = f"{metric}{{{parent}}}" if parent else metric
    query = f"label_values({selector}, {label})"
    return {"name": name, "label": title, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"var-{name}"}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
            "sort": 1, "hide": 0, "regex": "", "options": []}


def target(expr: str, legend: str = "", ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend or "__auto", "refId": ref,
            "range": True, **extra}


def panel(kind: str, title: str, description: str, targets: list[dict[str, Any]], *, unit: str = "short",
          width: int = 12, height: int = 8, **options: Any) -> dict[str, Any]:
    field_config: dict[str, Any] = {"defaults": {"unit": unit, **options.pop("defaults", {})}, "overrides": []}
    return {"type": kind, "title": title, "description": description, "datasource": DATASOURCE,
            "targets": targets, "fieldConfig": field_config, "options": options, "_size": (width, height)}


def thresholds(*steps: tuple[str, float | None]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": color, "value": value} for color, value in steps]}


def layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Place panels left to right on Grafana's 24-column grid, wrapping rows; ids in order."""
    x = y = row_height = 0
    placed = []
    for number, item in enumerate(panels, start=1):
        width, height = item.pop("_size")
        if x + width > 24:
            x, y, row_height = 0, y + row_height, 0
        placed.append({"id": number, "gridPos": {"h": height, "w": width, "x": x, "y": y}, **item})
        x += width
        row_height = max(row_height, height)
    return placed


def dashboard(uid: str, title: str, description: str, variables: list[dict[str, Any]],
              panels: list[dict[str, Any]], tags: list[str]) -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["gpuslo", *tags],
        "editable": True, "graphTooltip": 1, "schemaVersion": SCHEMA_VERSION, "version": 1,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "timezone": "browser",
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "panels": layout(panels),
        "links": [], "__requires": [{"type": "datasource", "id": "prometheus", "name": "Prometheus"}],
    }


# ---- the dashboards ---------------------------------------------------------------------------------------

def token_latency() -> dict[str, Any]:
    bucket = f"gpuslo_token_latency_seconds_bucket{{{TOKEN_SELECTOR}}}"
    count = f"gpuslo_token_latency_seconds_count{{{TOKEN_SELECTOR}}}"
    stalls = f"gpuslo_token_stalls_total{{{TOKEN_SELECTOR}}}"
    panels = [
        panel("heatmap", "Inter-token gap heatmap",
              "Gaps reported by token probes per bucket (token_latency p50/p99/max and every token_stall gap).",
              [target(f"sum by (le) (increase({bucket}[$__rate_interval]))", "{{le}}", format="heatmap")],
              unit="s", width=24, height=10,
              calculate=False, yAxis={"unit": "s"}, cellGap=1, color={"mode": "scheme", "scheme": "Turbo"},
              rowsFrame={"layout": "ge"}),
        panel("timeseries", "Gap p50 / p99 by endpoint", "histogram_quantile over the gap histogram.",
              [target(f"histogram_quantile(0.5, sum by (le, host, gpu, endpoint) "
                      f"(rate({bucket}[$__rate_interval])))", "p50 {{host}} gpu{{gpu}} {{endpoint}}"),
               target(f"histogram_quantile(0.99, sum by (le, host, gpu, endpoint) "
                      f"(rate({bucket}[$__rate_interval])))", "p99 {{host}} gpu{{gpu}} {{endpoint}}", "B")],
              unit="s"),
        panel("timeseries", "Token stalls per second", "token_stall events: gaps over the probe's threshold.",
              [target(f"sum by (host, gpu, endpoint, model) (rate({stalls}[$__rate_interval]))",
                      "{{host}} gpu{{gpu}} {{endpoint}} {{model}}")], unit="ops"),
        panel("stat", "Gaps over 250 ms", "Share of reported gaps above the 250 ms bucket edge.",
              [target(f'1 - sum(rate(gpuslo_token_latency_seconds_bucket{{{TOKEN_SELECTOR}, le="0.25"}}'
                      f"[$__rate_interval])) / sum(rate({count}[$__rate_interval]))", "over 250 ms")],
              unit="percentunit", width=6, defaults={"thresholds": thresholds(("green", None), ("red", 0.01))}),
        panel("timeseries", "Gaps reported per second", "Rate of observations in the gap histogram.",
              [target(f"sum by (host, gpu) (rate({count}[$__rate_interval]))", "{{host}} gpu{{gpu}}")],
              unit="ops", width=18),
    ]
    variables = [
        label_variable("host", "host", "gpuslo_token_latency_seconds_count", "Host"),
        label_variable("gpu", "gpu", "gpuslo_token_latency_seconds_count", "GPU", 'host=~"$host"'),
        label_variable("endpoint", "endpoint", "gpuslo_token_latency_seconds_count", "Endpoint",
                       'host=~"$host", gpu=~"$gpu"'),
        label_variable("model", "model", "gpuslo_token_latency_seconds_count", "Model",
                       'host=~"$host", gpu=~"$gpu", endpoint=~"$endpoint"'),
    ]
    return dashboard("gpuslo-token-latency", "gpuslo · token latency",
                     "Inter-token gaps and stalls per host, GPU, endpoint and model, from gpuslo's token probes.",
                     variables, panels, ["tokens", "latency"])


def fragmentation() -> dict[str, Any]:
    fr_thresholds = thresholds(("green", None), ("orange", 0.35), ("red", 0.65))
    panels = [
        panel("timeseries", "Fragmentation ratio per GPU",
              "(free - largest free block) / free. Healthy below 0.35; stalls were reported above 0.65.",
              [target(f"max by (host, gpu) (gpuslo_fragmentation_ratio{{{GPU_SELECTOR}}})", "{{host}} gpu{{gpu}}")],
              unit="percentunit", width=24, height=9,
              defaults={"min": 0, "max": 1, "thresholds": fr_thresholds,
                        "custom": {"thresholdsStyle": {"mode": "dashed"}, "lineInterpolation": "stepAfter"}}),
        panel("timeseries", "Largest free block", "Largest free block of the pool FR is taken over.",
              [target(f"min by (host, gpu) (gpuslo_memory_largest_free_block_bytes{{{GPU_SELECTOR}}})",
                      "{{host}} gpu{{gpu}}")], unit="bytes"),
        panel("timeseries", "Free memory", "Free memory FR is taken over (under 1 GiB, FR is noise).",
              [target(f"min by (host, gpu) (gpuslo_memory_free_bytes{{{GPU_SELECTOR}}})", "{{host}} gpu{{gpu}}")],
              unit="bytes"),
        panel("bargauge", "Most fragmented GPUs now", "The ten highest fragmentation ratios.",
              [target(f"topk(10, max by (host, gpu) (gpuslo_fragmentation_ratio{{{GPU_SELECTOR}}}))",
                      "{{host}} gpu{{gpu}}", instant=True, range=False)],
              unit="percentunit", defaults={"min": 0, "max": 1, "thresholds": fr_thresholds},
              orientation="horizontal", displayMode="gradient"),
        panel("timeseries", "OOMs and allocator events accepted", "cuda_oom and mem_fragmentation events per second.",
              [target('sum by (kind) (rate(gpuslo_events_accepted_total{kind=~"cuda_oom|mem_fragmentation"}'
                      "[$__rate_interval]))", "{{kind}}")], unit="ops"),
    ]
    variables = [
        label_variable("host", "host", "gpuslo_fragmentation_ratio", "Host"),
        label_variable("gpu", "gpu", "gpuslo_fragmentation_ratio", "GPU", 'host=~"$host"'),
    ]
    return dashboard("gpuslo-fragmentation", "gpuslo · GPU memory fragmentation",
                     "Fragmentation index, largest free block and free memory per GPU with the 0.35/0.65 thresholds.",
                     variables, panels, ["memory", "fragmentation"])


def slo() -> dict[str, Any]:
    events = 'gpuslo_slo_events_total{slo=~"$slo"}'
    panels = [
        panel("stat", "Error budget remaining", "Share of the SLO window's error budget left (worst group).",
              [target('gpuslo_slo_error_budget_remaining_ratio{slo=~"$slo"}', "{{slo}}", instant=True, range=False)],
              unit="percentunit", width=8,
              defaults={"min": 0, "max": 1, "thresholds": thresholds(("red", None), ("orange", 0.25),
                                                                      ("green", 0.5))}),
        panel("timeseries", "Error budget remaining over time", "The budget left, as Prometheus scraped it.",
              [target('gpuslo_slo_error_budget_remaining_ratio{slo=~"$slo"}', "{{slo}}")],
              unit="percentunit", width=16, defaults={"min": 0, "max": 1}),
        panel("timeseries", "Burn rate by lookback window",
              "Bad ratio over each lookback / (1 - objective); 14.4 over 1h and 6 over 6h page (SRE workbook).",
              [target('gpuslo_slo_burn_rate{slo=~"$slo"}', "{{slo}} {{window}}")], unit="short", width=24,
              defaults={"thresholds": thresholds(("green", None), ("orange", 6), ("red", 14.4)),
                        "custom": {"thresholdsStyle": {"mode": "dashed"}}}),
        panel("timeseries", "Bad events ratio", "Share of SLI request events that were bad.",
              [target(f'sum by (slo) (rate(gpuslo_slo_events_total{{slo=~"$slo", good="false"}}[$__rate_interval]))'
                      f" / sum by (slo) (rate({events}[$__rate_interval]))", "{{slo}}")],
              unit="percentunit"),
        panel("timeseries", "Open violations by severity", "Unresolved violations (open or acknowledged).",
              [target("sum by (severity) (gpuslo_open_violations)", "{{severity}}")], unit="short"),
    ]
    variables = [label_variable("slo", "slo", "gpuslo_slo_error_budget_remaining_ratio", "SLO")]
    return dashboard("gpuslo-slo", "gpuslo · SLO budget and burn",
                     "Error budget remaining and multi-window burn rates of every SLO the rulebooks define.",
                     variables, panels, ["slo"])


def self_monitoring() -> dict[str, Any]:
    job = 'job=~"$job"'
    panels = [
        panel("stat", "Engine up", "1 while the rules engine thread runs.",
              [target(f"min(gpuslo_engine_up{{{job}}})", "engine", instant=True, range=False)], width=4,
              defaults={"thresholds": thresholds(("red", None), ("green", 1))}),
        panel("stat", "Rulebook load errors", "Problems of the last rulebook load.",
              [target(f"max(gpuslo_rulebook_load_errors{{{job}}})", "errors", instant=True, range=False)], width=4,
              defaults={"thresholds": thresholds(("green", None), ("red", 1))}),
        panel("stat", "Rulebooks loaded", "Rulebooks running now.",
              [target(f"max(gpuslo_rulebooks_loaded{{{job}}})", "rulebooks", instant=True, range=False)], width=4),
        panel("table", "Build", "Version and Python of each instance.",
              [target(f"gpuslo_build_info{{{job}}}", "{{instance}} {{version}}", instant=True, range=False,
                      format="table")], width=12),
        panel("timeseries", "Events accepted per second by kind", "Ingest throughput.",
              [target(f"sum by (kind) (rate(gpuslo_events_accepted_total{{{job}}}[$__rate_interval]))", "{{kind}}")],
              unit="ops"),
        panel("timeseries", "Events rejected per second by reason", "Ingest refusals.",
              [target(f"sum by (reason) (rate(gpuslo_events_rejected_total{{{job}}}[$__rate_interval]))",
                      "{{reason}}")], unit="ops"),
        panel("timeseries", "Engine queue depth", "Events waiting for the rules engine.",
              [target(f"max by (instance) (gpuslo_engine_queue_depth{{{job}}})", "{{instance}}")]),
        panel("timeseries", "Engine batch p99", "Time to evaluate one batch against every rulebook.",
              [target(f"histogram_quantile(0.99, sum by (le) "
                      f"(rate(gpuslo_engine_batch_seconds_bucket{{{job}}}[$__rate_interval])))", "p99")], unit="s"),
        panel("timeseries", "Open violations by severity and status", "Unresolved violations.",
              [target(f"sum by (severity, status) (gpuslo_open_violations{{{job}}})", "{{severity}} {{status}}")]),
        panel("timeseries", "Rule matches per second", "Matches recorded as violations, by rule.",
              [target(f"sum by (rule) (rate(gpuslo_rule_matches_total{{{job}}}[$__rate_interval]))", "{{rule}}")],
              unit="ops"),
        panel("timeseries", "HTTP requests per second", "By route and status code.",
              [target(f"sum by (route, code) (rate(gpuslo_http_requests_total{{{job}}}[$__rate_interval]))",
                      "{{route}} {{code}}")], unit="reqps"),
        panel("timeseries", "HTTP p99 by route", "Time to answer a request.",
              [target(f"histogram_quantile(0.99, sum by (le, route) "
                      f"(rate(gpuslo_http_request_duration_seconds_bucket{{{job}}}[$__rate_interval])))",
                      "{{route}}")], unit="s"),
        panel("timeseries", "Resident memory", "process_resident_memory_bytes.",
              [target(f"process_resident_memory_bytes{{{job}}}", "{{instance}}")], unit="bytes"),
        panel("timeseries", "CPU", "CPU seconds per second.",
              [target(f"rate(process_cpu_seconds_total{{{job}}}[$__rate_interval])", "{{instance}}")],
              unit="percentunit"),
        panel("timeseries", "Late events and engine errors", "Events past the allowed lateness; engine failures.",
              [target(f"sum(rate(gpuslo_late_events_total{{{job}}}[$__rate_interval]))", "late"),
               target(f"sum by (reason) (rate(gpuslo_engine_errors_total{{{job}}}[$__rate_interval]))",
                      "error {{reason}}", "B")], unit="ops", width=24),
    ]
    variables = [label_variable("job", "job", "gpuslo_build_info", "Job")]
    return dashboard("gpuslo-self", "gpuslo · self-monitoring",
                     "Ingest, engine, rulebooks, HTTP and process health of gpuslo itself.",
                     variables, panels, ["self-monitoring"])


DASHBOARDS = {"gpuslo-token-latency.json": token_latency, "gpuslo-fragmentation.json": fragmentation,
              "gpuslo-slo.json": slo, "gpuslo-self.json": self_monitoring}


def rendered() -> dict[str, str]:
    """File name → the JSON text this script writes."""
    return {name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()}


def panel_queries(model: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target of a dashboard."""
    for item in model["panels"]:
        for query in item["targets"]:
            yield item["title"], query["expr"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a committed dashboard is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in rendered().items():
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print("out of date (run python dashboards/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
