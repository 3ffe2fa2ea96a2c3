"""Pure measurement: arrival times to summaries and events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuslo.probes.tokens.measure import (
    EventContext,
    WindowStats,
    quantile,
    request_events,
    summarize,
    wall_time,
    window_event,
)

MS = 1_000_000


def test_quantile_interpolates_like_numpy():
    values = [10.0, 20.0, 30.0, 40.0]
    assert quantile(values, 0.5) == 25.0
    assert quantile(values, 0.0) == 10.0 and quantile(values, 1.0) == 40.0
    assert quantile(values, 0.99) == pytest.approx(30 + 10 * (0.99 * 3 - 2))
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_summarize_gaps_ttft_and_stalls():
    start = 5_000 * MS
    tokens = [start + 50 * MS, start + 60 * MS, start + 300 * MS, start + 310 * MS, start + 510 * MS]
    summary = summarize(start, tokens, stall_threshold_ms=200)
    assert summary.ttft_ms == 50 and summary.tokens == 5
    assert summary.gaps_ms == (10, 240, 10, 200)
    assert [(s.token_index, s.gap_ms) for s in summary.stalls] == [(2, 240), (4, 200)]
    assert summary.itl_p50_ms == 105 and summary.itl_max_ms == 240


@pytest.mark.parametrize("count", [0, 1])
def test_summarize_too_few_tokens(count):
    summary = summarize(0, [7 * MS] * count)
    assert summary.tokens == count and summary.itl_p50_ms is None and summary.stalls == ()
    assert (summary.ttft_ms is None) == (count == 0)


def test_events_carry_wall_times_from_the_monotonic_offsets(assert_valid):
    ctx = EventContext(host="h", endpoint="http://e/v1/completions", model="m", labels={"team": "serving"})
    start_wall = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp() * 1e9)
    summary = summarize(0, [10 * MS, 260 * MS], 200)
    latency, stall = request_events(ctx, summary, request_id="r1", start_ns=0, start_wall_ns=start_wall,
                                    error="stream ended without [DONE]")
    assert_valid([latency, stall])
    assert latency.time == datetime(2025, 3, 1, tzinfo=UTC)
    assert stall.time == datetime(2025, 3, 1, 0, 0, 0, 260_000, tzinfo=UTC)
    assert stall.attrs == {"gap_ms": 250.0, "token_index": 1, "request_id": "r1",
                           "endpoint": "http://e/v1/completions", "model": "m"}
    assert latency.attrs["error"] == "stream ended without [DONE]" and latency.labels == {"team": "serving"}


def test_window_event_leaves_unknowns_out(assert_valid):
    ctx = EventContext(host="h", endpoint="http://e/metrics", model="m")
    event = window_event(ctx, WindowStats(window_s=15.0, itl_p50_ms=20.0), wall_time(0))
    assert_valid([event])
    assert event.attrs == {"endpoint": "http://e/metrics", "model": "m", "window_s": 15.0, "itl_p50_ms": 20.0}
