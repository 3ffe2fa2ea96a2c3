"""The active probe against a real local streaming server: gaps, stalls, TTFT and every failure mode."""

from __future__ import annotations

import threading
import time

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from tokens_server import QUICK_SCRIPT, STALL_SCRIPT, Served

from gpuslo.engine.errors import ConfigError
from gpuslo.engine.events import Event
from gpuslo.probes.tokens import ActiveProbeConfig, ActiveTokenProbe

TOLERANCE_MS = 2.0


def run(base: str, *, api: str = "chat", timeout_s: float = 5.0, stall_ms: float = 200.0) -> list[Event]:
    config = ActiveProbeConfig(url=base, model="tiny", max_tokens=20, api=api,  # type: ignore[arg-type]
                               timeout_s=timeout_s, stall_threshold_ms=stall_ms)
    with ActiveTokenProbe(config, host="node-a") as probe:
        return probe.run_once()


# This machine is shared (2 cores, busy neighbours): the OS may park the client for a few ms now and then,
# which is the machine's noise, not the probe's. A run counts when every gap is within 2 ms; 3 tries are allowed.
ATTEMPTS = 3


def stall_errors_ms(events: list[Event], served: Served) -> list[float]:
    """How far each measured stall and the max gap are from the injected sleeps and the server's send times."""
    errors = []
    for stall in events[1:]:
        index, gap = stall.attrs["token_index"], stall.attrs["gap_ms"]
        sent_gap_ms = (served.sent_ns[index] - served.sent_ns[index - 1]) / 1e6
        errors += [abs(gap - STALL_SCRIPT[index] * 1000), abs(gap - sent_gap_ms)]
    return [*errors, abs(events[0].attrs["itl_max_ms"] - 300), abs(events[0].attrs["itl_p50_ms"] - 10)]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_stalls_measured_within_2ms_of_the_injected_ones(stream_server, assert_valid, api):
    tries = []
    for _ in range(ATTEMPTS):
        events = run(f"{stream_server.base_url}/stalls", api=api)
        assert_valid(events)
        latency, *stalls = events
        assert latency.kind == "token_latency" and latency.host == "node-a"
        assert [e.kind for e in stalls] == ["token_stall", "token_stall"]
        assert [e.attrs["token_index"] for e in stalls] == [7, 15]
        served = stream_server.find(stalls[0].attrs["request_id"])
        tries.append(max(stall_errors_ms(events, served)))
        if tries[-1] < TOLERANCE_MS:
            break
    else:
        pytest.fail(f"worst gap error per try (ms): {tries}; every try was off by {TOLERANCE_MS} ms or more")

    assert served.path.endswith("/v1/chat/completions" if api == "chat" else "/v1/completions")
    assert served.body["stream"] is True and served.body["model"] == "tiny"
    for stall in stalls:
        assert stall.attrs["endpoint"] == latency.attrs["endpoint"] and stall.attrs["model"] == "tiny"
        assert stall.time > latency.time
    attrs = latency.attrs
    assert attrs["tokens"] == len(STALL_SCRIPT) and attrs["stalls"] == 2 and attrs["requests"] == 1
    assert "error" not in attrs
    # 19 gaps: the p99 interpolates between the 250 ms and 300 ms stalls.
    assert 250 < attrs["itl_p99_ms"] <= attrs["itl_max_ms"]
    assert STALL_SCRIPT[0] * 1000 <= attrs["ttft_ms"] < STALL_SCRIPT[0] * 1000 + 50
    assert attrs["endpoint"].endswith("/stalls" + ("/v1/chat/completions" if api == "chat" else "/v1/completions"))


def test_threshold_decides_what_is_a_stall(stream_server, assert_valid):
    events = run(f"{stream_server.base_url}/stalls", stall_ms=280)
    assert_valid(events)
    assert [e.attrs["token_index"] for e in events if e.kind == "token_stall"] == [7]
    assert events[0].attrs["stalls"] == 1


def test_full_url_picks_the_api(stream_server):
    events = run(f"{stream_server.base_url}/quick/v1/completions", api="chat")
    assert events[0].attrs["endpoint"] == f"{stream_server.base_url}/quick/v1/completions"
    assert events[0].attrs["tokens"] == len(QUICK_SCRIPT)
    served = next(s for s in reversed(stream_server.served) if s.path == "/quick/v1/completions")
    assert "prompt" in served.body and "messages" not in served.body


def test_sse_split_into_three_byte_writes_with_crlf(stream_server, assert_valid):
    events = run(f"{stream_server.base_url}/split")
    assert_valid(events)
    assert len(events) == 1 and events[0].attrs["tokens"] == 6 and "error" not in events[0].attrs


@pytest.mark.parametrize(("scenario", "error", "tokens"), [
    ("http503", "http 503", 0),
    ("cut", "stream ended without [DONE]", len(QUICK_SCRIPT)),
    ("malformed", "malformed SSE data", 2),
    ("inerror", "server error in stream: CUDA out of memory", 2),
    ("abort", "RemoteProtocolError", 3),
])
def test_failures_become_error_events(stream_server, assert_valid, scenario, error, tokens):
    events = run(f"{stream_server.base_url}/{scenario}")
    assert_valid(events)
    assert len(events) == 1
    assert error in events[0].attrs["error"]
    assert events[0].attrs["tokens"] == tokens and events[0].attrs["stalls"] == 0
    assert ("ttft_ms" in events[0].attrs) == (tokens > 0)


def test_connection_refused_is_an_error_event(free_port_refusing, assert_valid):
    events = run(f"http://127.0.0.1:{free_port_refusing}")
    assert_valid(events)
    assert events[0].attrs["error"].startswith("connect failed:")
    assert events[0].attrs["tokens"] == 0


def test_hang_beyond_timeout_is_an_error_event(stream_server, assert_valid):
    started = time.monotonic()
    events = run(f"{stream_server.base_url}/hang", timeout_s=0.3)
    elapsed = time.monotonic() - started
    assert_valid(events)
    assert events[0].attrs["error"] == "timeout after 0.3s"
    assert events[0].attrs["tokens"] == 2
    assert elapsed < 1.5


def test_bad_config_is_refused():
    with pytest.raises(ConfigError, match="http"):
        ActiveProbeConfig(url="127.0.0.1:8000", model="m")
    with pytest.raises(ConfigError, match="positive"):
        ActiveProbeConfig(url="http://x", model="m", max_tokens=0)
    with pytest.raises(ConfigError, match="gpu"):
        ActiveProbeConfig(url="http://x", model="m", gpu=1024)


def test_events_carry_the_configured_gpu_or_none(stream_server, assert_valid):
    base = f"{stream_server.base_url}/stalls"
    with ActiveTokenProbe(ActiveProbeConfig(url=base, model="tiny", max_tokens=20, gpu=5), host="h") as probe:
        events = probe.run_once()
    assert_valid(events)
    assert [e.gpu for e in events] == [5, 5, 5]
    assert all(e.gpu is None for e in run(base))


def test_schedule_runs_the_probe_and_feeds_the_sink(stream_server, assert_valid):
    received: list[Event] = []
    got = threading.Event()

    def sink(event: Event) -> None:
        received.append(event)
        got.set()

    config = ActiveProbeConfig(url=f"{stream_server.base_url}/quick", model="tiny", timeout_s=5)
    with ActiveTokenProbe(config, host="node-a") as probe:
        scheduler = BackgroundScheduler()
        scheduler.start()
        try:
            job = probe.schedule(scheduler, 0.05, sink)
            assert job.id == f"tokens:{probe.url}"
            assert got.wait(5)
        finally:
            scheduler.shutdown(wait=True)  # before the probe closes its client under a running job
    assert_valid(received)
    assert received[0].kind == "token_latency" and received[0].attrs["tokens"] == len(QUICK_SCRIPT)
