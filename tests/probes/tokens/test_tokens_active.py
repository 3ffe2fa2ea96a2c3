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
    """The token_latency and token_stall events of one request (its token_request events: `run_all`)."""
    return measured(run_all(base, api=api, timeout_s=timeout_s, stall_ms=stall_ms))


def run_all(base: str, *, api: str = "chat", timeout_s: float = 5.0, stall_ms: float = 200.0) -> list[Event]:
    config = ActiveProbeConfig(url=base, model="tiny", max_tokens=20, api=api,  # type: ignore[arg-type]
                               timeout_s=timeout_s, stall_threshold_ms=stall_ms)
    with ActiveTokenProbe(config, host="node-a") as probe:
        return probe.run_once()


def measured(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind != "token_request"]


def phases(events: list[Event]) -> list[str]:
    return [e.attrs["phase"] for e in events if e.kind == "token_request"]


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
        every = run_all(f"{stream_server.base_url}/stalls", api=api)
        assert_valid(every)
        events = measured(every)
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

    start, first, *_measured, done = every
    assert [e.kind for e in every] == ["token_request", "token_request", "token_latency", "token_stall",
                                       "token_stall", "token_request"]
    assert phases(every) == ["start", "first_token", "done"]
    assert {e.attrs["request_id"] for e in (start, first, done)} == {served.request_id}
    assert start.time == latency.time < first.time < stalls[0].time < done.time
    assert first.attrs["ttft_ms"] == done.attrs["ttft_ms"] == attrs["ttft_ms"]
    assert done.attrs["tokens"] == len(STALL_SCRIPT) and "error" not in done.attrs
    assert all(e.attrs["endpoint"] == attrs["endpoint"] and e.attrs["model"] == "tiny" for e in (start, first, done))


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
    every = run_all(f"{stream_server.base_url}/{scenario}")
    assert_valid(every)
    events = measured(every)
    assert len(events) == 1
    assert error in events[0].attrs["error"]
    assert events[0].attrs["tokens"] == tokens and events[0].attrs["stalls"] == 0
    assert ("ttft_ms" in events[0].attrs) == (tokens > 0)
    assert phases(every) == (["start", "first_token", "error"] if tokens else ["start", "error"])
    end = every[-1]
    assert end.attrs["error"] == events[0].attrs["error"] and end.attrs["tokens"] == tokens
    assert end.time >= every[0].time


def test_connection_refused_is_an_error_event(free_port_refusing, assert_valid):
    every = run_all(f"http://127.0.0.1:{free_port_refusing}")
    assert_valid(every)
    events = measured(every)
    assert events[0].attrs["error"].startswith("connect failed:")
    assert events[0].attrs["tokens"] == 0
    assert phases(every) == ["start", "error"] and every[-1].attrs["error"].startswith("connect failed:")


def test_hang_beyond_timeout_is_an_error_event(stream_server, assert_valid):
    started = time.monotonic()
    every = run_all(f"{stream_server.base_url}/hang", timeout_s=0.3)
    elapsed = time.monotonic() - started
    assert_valid(every)
    events = measured(every)
    assert events[0].attrs["error"] == "timeout after 0.3s"
    assert events[0].attrs["tokens"] == 2
    assert elapsed < 1.5
    assert phases(every) == ["start", "first_token", "error"]
    assert every[-1].attrs["error"] == "timeout after 0.3s" and every[-1].attrs["tokens"] == 2


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
    assert [e.gpu for e in events] == [5] * 6  # start, first token, latency, two stalls, done
    assert all(e.gpu is None for e in run_all(base))


def test_sink_gets_start_before_the_request_is_sent_and_first_token_while_it_streams(stream_server, assert_valid):
    """What the server had seen of the request when each event reached the sink: none of it at start, and only
    the first tokens (of 20, with stalls of 300 and 250 ms still to come) at first_token."""
    seen_by_server: dict[str, int | None] = {}

    def sink(event: Event) -> None:
        if event.kind == "token_request":
            served = [s for s in stream_server.served if s.request_id == event.attrs["request_id"]]
            seen_by_server[event.attrs["phase"]] = len(served[0].sent_ns) if served else None

    config = ActiveProbeConfig(url=f"{stream_server.base_url}/stalls", model="tiny", max_tokens=20)
    with ActiveTokenProbe(config, host="node-a") as probe:
        events = probe.run_once(sink)
    assert_valid(events)
    assert seen_by_server["start"] is None  # not even received: the start left before the request
    assert seen_by_server["first_token"] is not None and seen_by_server["first_token"] < len(STALL_SCRIPT)
    assert seen_by_server["done"] == len(STALL_SCRIPT)


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
    assert [e.kind for e in received[:3]] == ["token_request", "token_request", "token_latency"]
    assert received[2].attrs["tokens"] == len(QUICK_SCRIPT)
