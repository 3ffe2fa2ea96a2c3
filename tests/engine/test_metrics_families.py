"""The families /metrics serves: token-latency histogram, fragmentation gauges, state read at scrape time, the
label cap, and no `_created` samples."""

from __future__ import annotations

from pathlib import Path

from metrics_support import open_core, served_families
from prometheus_client import CollectorRegistry, generate_latest

from gpuslo.engine.events import parse_event
from gpuslo.engine.metrics_signals import OTHER, BoundedLabels, SignalMetrics

TOKENS = {"id": "t-1", "kind": "token_latency", "time": "2025-01-01T00:00:00Z", "host": "node-1", "gpu": 2,
          "attrs": {"endpoint": "/v1/chat", "model": "m", "itl_p50_ms": 12.0, "itl_p99_ms": 240.0,
                    "itl_max_ms": 4100.0, "tokens": 100}}
STALL = {"id": "s-1", "kind": "token_stall", "time": "2025-01-01T00:00:01Z", "host": "node-1", "gpu": 2,
         "attrs": {"endpoint": "/v1/chat", "model": "m", "gap_ms": 700.0, "token_index": 4}}
FRAG = {"id": "f-1", "kind": "mem_fragmentation", "time": "2025-01-01T00:00:02Z", "host": "node-1", "gpu": 2,
        "attrs": {"scope": "allocator", "fragmentation_ratio": 0.71, "free_bytes": 8 * 2**30,
                  "largest_free_bytes": 2 * 2**30}}


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_token_gaps_land_in_their_buckets_and_stalls_count():
    registry = CollectorRegistry()
    signals = SignalMetrics(registry)
    signals.observe([parse_event(TOKENS), parse_event(STALL)])
    key = {"host": "node-1", "gpu": "2", "endpoint": "/v1/chat", "model": "m"}
    assert _value(registry, "gpuslo_token_latency_seconds_count", **key) == 4  # p50, p99, max and the stall
    assert _value(registry, "gpuslo_token_latency_seconds_bucket", **key, le="0.015") == 1  # 12 ms
    assert _value(registry, "gpuslo_token_latency_seconds_bucket", **key, le="0.25") == 2  # + 240 ms
    assert _value(registry, "gpuslo_token_latency_seconds_bucket", **key, le="1.0") == 3  # + the 700 ms stall
    assert _value(registry, "gpuslo_token_latency_seconds_bucket", **key, le="5.0") == 4  # + 4.1 s
    assert _value(registry, "gpuslo_token_latency_seconds_sum", **key) == 12 / 1000 + 0.24 + 4.1 + 0.7
    assert _value(registry, "gpuslo_token_stalls_total", **key) == 1


def test_fragmentation_gauges_hold_the_latest_sample():
    registry = CollectorRegistry()
    signals = SignalMetrics(registry)
    later = {**FRAG, "id": "f-2", "attrs": {**FRAG["attrs"], "fragmentation_ratio": 0.2}}
    signals.observe([parse_event(FRAG), parse_event(later)])
    key = {"host": "node-1", "gpu": "2", "scope": "allocator"}
    assert _value(registry, "gpuslo_fragmentation_ratio", **key) == 0.2
    assert _value(registry, "gpuslo_memory_free_bytes", **key) == 8 * 2**30
    assert _value(registry, "gpuslo_memory_largest_free_block_bytes", **key) == 2 * 2**30


def test_each_label_keeps_at_most_cap_values_then_other():
    labels = BoundedLabels(cap=3)
    assert [labels.value("host", f"h{i}") for i in range(5)] == ["h0", "h1", "h2", OTHER, OTHER]
    assert labels.value("host", "h1") == "h1"  # a value seen before keeps its own series
    assert labels.value("gpu", None) == ""  # each label has its own budget; no GPU is the empty value
    registry = CollectorRegistry()
    signals = SignalMetrics(registry, cap=2)
    signals.observe([parse_event({**FRAG, "id": f"f{i}", "host": f"node-{i}"}) for i in range(5)])
    hosts = sorted(s.labels["host"] for f in registry.collect() if f.name == "gpuslo_fragmentation_ratio"
                   for s in f.samples)
    assert hosts == ["node-0", "node-1", OTHER]


def test_state_is_read_at_scrape_time_and_created_samples_are_not_served(tmp_path: Path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "broken.yaml").write_text("rulebook: broken\nversion: [\n", encoding="utf-8")
    core = open_core(tmp_path, rules_dir=rules)
    try:
        families = served_families(core)
        open_counts = {(s.labels["severity"], s.labels["status"]): s.value
                       for s in families["gpuslo_open_violations"].samples}
        assert open_counts[("critical", "open")] == 0 and len(open_counts) == 8  # 4 severities × 2 statuses
        assert families["gpuslo_engine_up"].samples[0].value == 1
        assert families["gpuslo_rulebook_load_errors"].samples[0].value == 1
        assert families["gpuslo_rulebooks_loaded"].samples[0].value == 0
        assert families["gpuslo_build_info"].samples[0].labels["version"]
        assert "process_cpu_seconds_total" in families
        core.ingest([TOKENS])
        text = generate_latest(core.metrics.exposed()).decode()
        assert "gpuslo_events_accepted_total{kind=\"token_latency\"} 1.0" in text
        assert "_created" not in text
        assert "_created" in generate_latest(core.metrics.registry).decode()  # what the filter takes out
    finally:
        core.close()
    assert served_families(core)["gpuslo_engine_up"].samples[0].value == 0  # the engine thread stopped
