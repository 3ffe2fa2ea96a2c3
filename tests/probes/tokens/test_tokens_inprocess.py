"""measure_stream around a real generator that sleeps: same tokens out, same events reported."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gpuslo.engine.events import Event
from gpuslo.probes.tokens import measure_stream

DELAYS = (0.015, 0.005, 0.005, 0.250, 0.005, 0.005)
TOLERANCE_MS = 2.0


def measured(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind != "token_request"]


def phases(events: list[Event]) -> list[str]:
    return [e.attrs["phase"] for e in events if e.kind == "token_request"]


def tokens(delays=DELAYS, fail_at: int | None = None) -> Iterator[str]:
    for index, delay in enumerate(delays):
        if index == fail_at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        time.sleep(delay)
        yield f"tok{index}"


def test_yields_the_same_tokens_and_reports_on_exhaustion(assert_valid):
    # Up to 3 tries: on this shared 2-core machine a sleep may overshoot by a few ms now and then.
    for _ in range(3):
        events: list[Event] = []
        wrapped = measure_stream(tokens(), sink=events.append, endpoint="inproc://engine", model="tiny",
                                 host="node-b", request_id="req-1")
        assert phases(events) == ["start"]  # at the call, before the first item is asked for
        out = []
        for item in wrapped:
            out.append(item)
            assert [e.kind for e in events] == ["token_request", "token_request"]  # until the stream ends
        assert out == [f"tok{i}" for i in range(len(DELAYS))]
        assert_valid(events)
        start, first, latency, stall, done = events
        errors = [abs(latency.attrs["ttft_ms"] - DELAYS[0] * 1000), abs(latency.attrs["itl_max_ms"] - 250),
                  abs(stall.attrs["gap_ms"] - 250)]
        if max(errors) < TOLERANCE_MS:
            break
    else:
        pytest.fail(f"timing off by {TOLERANCE_MS} ms or more in every try: {errors}")
    assert latency.kind == "token_latency" and latency.host == "node-b"
    assert latency.attrs["tokens"] == len(DELAYS) and latency.attrs["stalls"] == 1
    assert "error" not in latency.attrs
    assert stall.attrs["token_index"] == 3 and stall.attrs["request_id"] == "req-1"
    assert latency.gpu is None and stall.gpu is None
    assert phases(events) == ["start", "first_token", "done"]
    assert {e.attrs["request_id"] for e in (start, first, done)} == {"req-1"}
    assert first.attrs["ttft_ms"] == latency.attrs["ttft_ms"] == done.attrs["ttft_ms"]
    assert start.time == latency.time < first.time < stall.time <= done.time
    assert done.attrs["tokens"] == len(DELAYS) and done.attrs["endpoint"] == "inproc://engine"


def test_gpu_goes_into_the_events():
    events: list[Event] = []
    assert list(measure_stream(iter(["a", "b"]), sink=events.append, endpoint="inproc://e", model="m",
                               host="h", gpu=2)) == ["a", "b"]
    assert [(e.kind, e.gpu) for e in events] == [("token_request", 2), ("token_request", 2), ("token_latency", 2),
                                                 ("token_request", 2)]


def test_reports_and_reraises_when_the_iterator_fails(assert_valid):
    events: list[Event] = []
    wrapped = measure_stream(tokens(fail_at=2), sink=events.append, endpoint="e", model="m", host="h")
    got = []
    with pytest.raises(RuntimeError, match="illegal memory access"):
        for item in wrapped:
            got.append(item)
    assert got == ["tok0", "tok1"]
    assert_valid(events)
    (latency,) = measured(events)
    assert latency.attrs["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert latency.attrs["tokens"] == 2
    assert phases(events) == ["start", "first_token", "error"]
    assert events[-1].attrs["error"] == latency.attrs["error"] and events[-1].attrs["tokens"] == 2


def test_consumer_closing_early_is_reported():
    events: list[Event] = []
    wrapped = measure_stream(tokens(delays=(0.001,) * 5), sink=events.append, endpoint="e", model="m", host="h")
    assert next(wrapped) == "tok0"
    wrapped.close()  # type: ignore[attr-defined]
    assert measured(events)[0].attrs["error"] == "stream closed by consumer after 1 tokens"
    assert phases(events) == ["start", "first_token", "error"]


def test_is_token_skips_keepalives_and_the_clock_starts_at_the_call():
    events: list[Event] = []
    wrapped = measure_stream(iter(["", "a", "", "b"]), sink=events.append, endpoint="e", model="m", host="h",
                             is_token=bool, stall_threshold_ms=1)
    time.sleep(0.02)
    assert list(wrapped) == ["", "a", "", "b"]
    latency = measured(events)[0]
    assert latency.attrs["tokens"] == 2 and latency.attrs["ttft_ms"] >= 20


def test_a_stream_without_tokens_ends_done_without_a_first_token():
    events: list[Event] = []
    assert list(measure_stream(iter(["", ""]), sink=events.append, endpoint="e", model="m", host="h",
                               is_token=bool)) == ["", ""]
    assert phases(events) == ["start", "done"]
    assert events[-1].attrs["tokens"] == 0 and "ttft_ms" not in events[-1].attrs
