"""The passive probe on realistic vLLM, SGLang and TGI expositions: quantiles from histogram deltas."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from gpuslo.probes.tokens import PassiveProbeConfig, PassiveTokenProbe
from gpuslo.probes.tokens.passive import Histogram, histogram_quantile

# Bucket bounds as vLLM 0.8-0.10 declares them (vllm/v1/metrics/loggers.py).
VLLM_TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL_LE = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
S = 1_000_000_000


def histogram_text(name: str, help_text: str, bounds: tuple[float, ...],
                   per_engine: Mapping[str, Mapping[float, int]], created: float = 1736000000.0) -> str:
    """A histogram as vLLM's prometheus_client renders it (labels sorted, `le` between them, `_created`);
    per_engine maps the `engine` label to per-bucket (not cumulative) counts."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for engine, counts in per_engine.items():
        cumulative, total_sum = 0, 0.0
        for upper in bounds:
            cumulative += counts.get(upper, 0)
            total_sum += counts.get(upper, 0) * upper * 0.9
            lines.append(f'{name}_bucket{{engine="{engine}",le="{upper}",model_name="{MODEL}"}} '
                         f"{float(cumulative)}")
        lines.append(f'{name}_bucket{{engine="{engine}",le="+Inf",model_name="{MODEL}"}} {float(cumulative)}')
        lines.append(f'{name}_count{{engine="{engine}",model_name="{MODEL}"}} {float(cumulative)}')
        lines.append(f'{name}_sum{{engine="{engine}",model_name="{MODEL}"}} {total_sum}')
    lines += [f"# HELP {name}_created {help_text}", f"# TYPE {name}_created gauge"]
    lines += [f'{name}_created{{engine="{engine}",model_name="{MODEL}"}} {created}' for engine in per_engine]
    return "\n".join(lines) + "\n"


def vllm_page(ttft: Mapping[str, Mapping[float, int]], itl: Mapping[str, Mapping[float, int]],
              tpot: Mapping[str, Mapping[float, int]] | None = None) -> str:
    head = (
        "# HELP python_gc_objects_collected_total Objects collected during gc\n"
        "# TYPE python_gc_objects_collected_total counter\n"
        'python_gc_objects_collected_total{generation="0"} 12109.0\n'
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} 3.0\n'
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        f'vllm:gpu_cache_usage_perc{{engine="0",model_name="{MODEL}"}} 0.0421\n'
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="{MODEL}"}} 5210.0\n'
    )
    return (head
            + histogram_text("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                             VLLM_TTFT_LE, ttft)
            + histogram_text("vllm:time_per_output_token_seconds",
                             "Histogram of time per output token in seconds.", VLLM_ITL_LE, tpot or {})
            + histogram_text("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             VLLM_ITL_LE, itl))


SCRAPE_1 = vllm_page(ttft={"0": {0.04: 3, 0.06: 2}, "1": {0.04: 1}},
                     itl={"0": {0.01: 40, 0.025: 20}, "1": {0.025: 10}},
                     tpot={"0": {0.01: 5}, "1": {}})
# Since scrape 1: TTFT +7 in (0.04, 0.06], +1 in (0.1, 0.25], +2 in (0.25, 0.5] (10 requests);
# ITL +60 in (0.01, 0.025], +30 in (0.025, 0.05], +10 in (0.2, 0.3] (100 gaps), spread over two engines.
SCRAPE_2 = vllm_page(ttft={"0": {0.04: 3, 0.06: 6, 0.25: 1}, "1": {0.04: 1, 0.06: 3, 0.5: 2}},
                     itl={"0": {0.01: 40, 0.025: 60, 0.05: 30, 0.3: 10}, "1": {0.025: 30}},
                     tpot={"0": {0.01: 5, 5.0: 90}, "1": {}})


def probe() -> PassiveTokenProbe:
    return PassiveTokenProbe(PassiveProbeConfig(url="http://gpu-7:8000/metrics", labels={"team": "serving"}),
                             host="gpu-7")


def test_first_scrape_is_the_baseline_then_quantiles_come_from_deltas(assert_valid):
    passive = probe()
    assert passive.observe(SCRAPE_1, 100 * S, 1_736_000_000 * S) == []
    events = passive.observe(SCRAPE_2, 115 * S, 1_736_000_015 * S)
    assert_valid(events)
    assert len(events) == 1
    event = events[0]
    assert event.kind == "token_latency" and event.host == "gpu-7"
    assert event.labels == {"team": "serving", "engine": "vllm"}
    # p50 rank 50 in (0.01, 0.025] holding 60: 0.01 + 0.015*50/60; p99 rank 99 in (0.2, 0.3]: 0.2 + 0.1*9/10;
    # TTFT p99 rank 9.9 in (0.25, 0.5] after 8 below: 0.25 + 0.25*1.9/2. The TPOT histogram (5 s) is ignored.
    assert dict(event.attrs) == pytest.approx({
        "endpoint": "http://gpu-7:8000/metrics", "model": MODEL, "window_s": 15.0, "requests": 10,
        "tokens": 110, "itl_p50_ms": 22.5, "itl_p99_ms": 290.0, "ttft_ms": 487.5})


def test_counter_reset_counts_from_zero():
    passive = probe()
    passive.observe(SCRAPE_1, 100 * S, 1_736_000_000 * S)
    passive.observe(SCRAPE_2, 115 * S, 1_736_000_015 * S)
    # The server restarted with one engine: every count is lower than before.
    restarted = vllm_page(ttft={"0": {0.02: 2}}, itl={"0": {0.01: 5, 0.025: 5}})
    (event,) = passive.observe(restarted, 130 * S, 1_736_000_030 * S)
    assert event.attrs["requests"] == 2 and event.attrs["tokens"] == 12
    assert event.attrs["ttft_ms"] == pytest.approx(19.9)  # 0.01 + 0.01*1.98/2
    assert event.attrs["itl_p50_ms"] == pytest.approx(10.0)
    assert event.attrs["itl_p99_ms"] == pytest.approx(24.7)  # 0.01 + 0.015*4.9/5


def test_reset_of_one_engine_while_the_other_grows():
    passive = probe()
    passive.observe(vllm_page(ttft={"0": {0.04: 5}, "1": {0.04: 50}}, itl={"0": {}, "1": {}}), 0, 0)
    # Engine 1 restarted (50 → 1); engine 0 grew by 20. A summed series would wrongly show -29.
    (event,) = passive.observe(vllm_page(ttft={"0": {0.04: 25}, "1": {0.04: 1}}, itl={"0": {}, "1": {}}),
                               10 * S, 10 * S)
    assert event.attrs["requests"] == 21
    assert "itl_p50_ms" not in event.attrs and "tokens" not in event.attrs


def test_no_traffic_no_event():
    passive = probe()
    passive.observe(SCRAPE_1, 0, 0)
    assert passive.observe(SCRAPE_1, 15 * S, 15 * S) == []


SGLANG = """# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} {a}
sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="meta-llama/Llama-3.1-8B-Instruct"} {b}
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} {b}
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} {b}
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.5
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.02",model_name="meta-llama/Llama-3.1-8B-Instruct"} {c}
sglang:inter_token_latency_seconds_bucket{le="0.04",model_name="meta-llama/Llama-3.1-8B-Instruct"} {d}
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} {e}
sglang:inter_token_latency_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} {e}
sglang:inter_token_latency_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
"""


def sglang(a: int, b: int, c: int, d: int, e: int) -> str:
    return SGLANG.replace("{a}", str(a)).replace("{b}", str(b)).replace("{c}", str(c)) \
        .replace("{d}", str(d)).replace("{e}", str(e))


def test_sglang_and_the_inf_bucket(assert_valid):
    passive = probe()
    passive.observe(sglang(0, 0, 0, 0, 0), 0, 0)
    (event,) = passive.observe(sglang(4, 10, 50, 90, 100), 5 * S, 5 * S)
    assert_valid([event])
    assert event.labels["engine"] == "sglang" and event.attrs["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    # TTFT p99 rank 9.9 in (0.1, 0.2] after 4: 0.1 + 0.1*5.9/6; ITL p99 rank 99 lies past 0.04, in +Inf.
    assert event.attrs["ttft_ms"] == pytest.approx(198.333)
    assert event.attrs["itl_p50_ms"] == pytest.approx(20.0)
    assert event.attrs["itl_p99_ms"] == pytest.approx(40.0)
    assert event.attrs["tokens"] == 110


TGI = """# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="0.01"} {a}
tgi_request_mean_time_per_token_duration_bucket{le="0.05"} {b}
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} {b}
tgi_request_mean_time_per_token_duration_sum 0.25
tgi_request_mean_time_per_token_duration_count {b}
"""


def test_tgi_has_no_model_label_so_the_configured_one_is_used():
    passive = PassiveTokenProbe(PassiveProbeConfig(url="http://tgi/metrics", model="bigcode/starcoder"),
                                host="h")
    passive.observe(TGI.replace("{a}", "0").replace("{b}", "0"), 0, 0)
    (event,) = passive.observe(TGI.replace("{a}", "2").replace("{b}", "10"), S, S)
    assert event.attrs["model"] == "bigcode/starcoder" and event.labels["engine"] == "tgi"
    assert event.attrs["itl_p50_ms"] == pytest.approx(10 + 40 * 3 / 8)
    assert "tokens" not in event.attrs and "requests" not in event.attrs  # one observation per request


def test_histogram_quantile_edges():
    assert histogram_quantile(0.5, Histogram(())) is None
    assert histogram_quantile(0.5, Histogram(((1.0, 0.0), (float("inf"), 0.0)))) is None
    assert histogram_quantile(0.5, Histogram(((float("inf"), 4.0),))) is None
    assert histogram_quantile(1.0, Histogram(((1.0, 4.0), (2.0, 4.0), (float("inf"), 4.0)))) == 1.0


def test_scrape_over_http_and_failures(stream_server, free_port_refusing, assert_valid):
    passive = PassiveTokenProbe(PassiveProbeConfig(url=f"{stream_server.base_url}/metrics"), host="h")
    stream_server.metrics_text = SCRAPE_1
    assert passive.scrape_once() == []
    stream_server.metrics_text = SCRAPE_2
    (event,) = passive.scrape_once()
    assert event.attrs["requests"] == 10 and event.attrs["window_s"] >= 0
    stream_server.metrics_text = "this is { not prometheus\n"
    (down,) = passive.scrape_once()
    stream_server.metrics_status = 500
    try:
        (http_down,) = passive.scrape_once()
    finally:
        stream_server.metrics_status = 200
    passive.close()
    unreachable = PassiveTokenProbe(PassiveProbeConfig(url=f"http://127.0.0.1:{free_port_refusing}/metrics"),
                                    host="h")
    refused = unreachable.scrape_once()
    unreachable.close()
    assert_valid([event, down, http_down, *refused])
    for status in (down, http_down, *refused):
        assert status.kind == "probe_status" and status.attrs["state"] == "down"
    assert "500" in http_down.attrs["detail"] and "ConnectError" in refused[0].attrs["detail"]
