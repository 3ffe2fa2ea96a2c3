"""The five-layer split of a stall, the interval arithmetic under it, the clock alignment and the probe's options."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import format_time, parse_event
from gpuslo.probes.attribution import attribute
from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe
from gpuslo.probes.attribution.clock import Alignment, ClockOffset, measure, remeasure
from gpuslo.probes.attribution.signals import GpuSample, Interval
from gpuslo.probes.attribution.spans import intersect, length, subtract, union
from gpuslo.probes.tokens.measure import summarize

MS = 1_000_000


def test_spans():
    assert union([(5, 9), (0, 2), (1, 3), (9, 10), (4, 4)]) == [(0, 3), (5, 10)]
    assert intersect([(0, 3), (5, 10)], [(2, 6), (8, 20)]) == [(2, 3), (5, 6), (8, 10)]
    assert subtract([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert subtract([(0, 10)], []) == [(0, 10)] and length([(0, 3), (5, 10)]) == 8


def iv(kind: str, start_ms: float, end_ms: float, **kw) -> Interval:
    return Interval(kind, int(start_ms * MS), int(end_ms * MS), **kw)


def test_a_stall_split_by_priority_with_evidence():
    """[0, 400] ms: the server sent nothing over [20, 400]; inside, the thread was runnable 100 ms, in fsync 100
    ms, in a cudaFree burst 50 ms and waiting for the GPU over 150 ms (part of it also runnable)."""
    signals = [iv("send_gap", 20, 400, tid=7), iv("runnable", 30, 130, tid=7, other_pid=99, other_comm="hog", cpu=3),
               iv("syscall", 130, 230, tid=7, detail="fsync"), iv("cuda_alloc", 230, 280, tid=8, detail="cudaFree"),
               iv("cuda_wait", 100, 390, tid=7, detail="cuStreamSynchronize"), iv("retransmit", 5, 5)]
    samples = [GpuSample(int(t * MS), 0, 97.0, 0.99, 0.5, 0.4, ((1244, 90.0), (5, 8.0))) for t in (100, 200, 300)]
    a = attribute(0, 400 * MS, signals, samples, own_pids=[5])
    assert dict(a.shares_ms) == {"network": 20.0, "scheduler": 100.0, "kernel": 100.0, "driver": 50.0,
                                 "gpu": 110.0, "compute": 0.0}
    assert a.unattributed_ms == pytest.approx(20.0) and a.dominant == "gpu" and a.coverage == 0.95
    attrs = a.attrs()
    assert attrs["attribution.scheduler_ms"] == 100.0 and attrs["attribution.other_pid"] == 1244.0
    assert attrs["attribution.other_sm_share"] == 0.9 and attrs["attribution.sm_active"] == 0.99
    assert "thread 7 runnable 100 ms while hog (pid 99) ran on CPU 3" in attrs["attribution.evidence"]
    assert "fsync 100 ms in thread 7" in attrs["attribution.evidence"]
    assert "pid 1244 held 90% of the SMs" in attrs["attribution.evidence"]
    assert "1 TCP retransmits" in attrs["attribution.evidence"]
    event = parse_event({"id": "s", "kind": "token_stall", "time": "2026-12-01T00:00:00Z", "host": "h",
                         "attrs": {"gap_ms": 400.0, **attrs}})  # the stall with its attribution is a valid event
    assert event.get("attribution.dominant") == "gpu"


def test_no_server_gap_is_the_network_and_no_signal_is_unattributed():
    assert attribute(0, 300 * MS, []).dominant == "network"
    quiet = attribute(0, 300 * MS, [iv("send_gap", 0, 300)])
    assert quiet.dominant == "unattributed" and quiet.unattributed_ms == 300 and quiet.coverage == 0.0
    assert quiet.attrs()["attribution.evidence"] == "unattributed: no signal covered the stall"
    assert attribute(0, 300 * MS, [], server_observed=False).dominant == "unattributed"


def test_clock_offset_bound_holds_for_a_scheduling_delay():
    """The wall read lands anywhere inside the bracket; the offset is right within half the bracket."""
    reads = iter([100, 1_000_100, 150])  # mono, wall, mono: 50 ns bracket
    found = measure(1, mono=lambda: next(reads), wall=lambda: next(reads))
    assert found == ClockOffset(1_000_100 - 125, 25, 100)
    assert found.to_mono(found.to_wall(777)) == 777


def test_real_clocks_align_within_the_measured_error():
    import time

    align = remeasure(remeasure(None))
    mono, wall, mono2 = time.monotonic_ns(), time.time_ns(), time.monotonic_ns()
    assert abs(align.current.to_wall((mono + mono2) // 2) - wall) <= align.error_ns(mono) + (mono2 - mono)
    assert align.current.error_ns < 50_000  # a few microseconds at most, even on a busy machine
    assert Alignment(ClockOffset(0, 10, 0), drift_ppm=2.0).error_ns(1_000_000_000) == 10 + 2000


@pytest.mark.parametrize("arg, problem", [("pid=x", "invalid literal"), ("hz=500", "outside 1..100"),
                                          ("color=red", "unknown key"), ("comm=a b", "comm 'a b'"),
                                          ("pid", "expected key=value"), ("cgroup=a++b", "empty cgroup path")])
def test_bad_options_are_refused_precisely(arg, problem):
    with pytest.raises(ProbeError, match=problem):
        AttributionConfig.parse(arg)


def test_options():
    assert AttributionConfig.parse("pid=12+34,port=8000,comm=gs-engine,hz=50,lib=/a/libcuda.so.1,nvml=0") == \
        AttributionConfig(pids=(12, 34), port=8000, hz=50.0, libraries=("/a/libcuda.so.1",), nvml=False,
                          comm="gs-engine")
    assert AttributionConfig.parse("cgroup=/sys/fs/cgroup/serving+system.slice/vllm.service").cgroups == (
        "/sys/fs/cgroup/serving", "system.slice/vllm.service")
    assert AttributionConfig.parse("sendq=0").sendq is False and AttributionConfig.parse("").sendq is True


def test_a_requests_worst_gap_is_windowed_from_its_token_latency():
    """The tokens probe says when a request's worst gap ended (itl_max_at_ms after its start); the probe's window
    for the token_latency is that gap, on the same clock as a token_stall ending at the same token."""

    start = 1_000_000_000
    tokens = [start + 50_000_000 * k for k in range(1, 5)] + [start + 600_000_000, start + 650_000_000]
    summary = summarize(start, tokens, 200.0)
    assert summary.itl_max_ms == 400.0 and summary.itl_max_at_ms == 600.0
    probe = AttributionProbe(AttributionConfig(), "node-1")
    probe.alignment = Alignment(ClockOffset(offset_ns=1_700_000_000_000_000_000, error_ns=50, at_ns=0))
    began = datetime(2026, 1, 1, tzinfo=UTC)
    latency = parse_event({"id": "l-1", "kind": "token_latency", "time": format_time(began), "host": "node-1",
                           "attrs": {"itl_max_ms": 400.0, "itl_max_at_ms": 600.0, "tokens": 6}})
    stall = parse_event({"id": "s-1", "kind": "token_stall", "time": format_time(began + timedelta(milliseconds=600)),
                         "host": "node-1", "attrs": {"gap_ms": 400.0}})
    assert probe.attributable(latency) and probe.attributable(stall)
    assert probe.window(latency) == probe.window(stall)
    assert probe.window(latency)[1] - probe.window(latency)[0] == 400_000_000
    no_gap = parse_event({"id": "l-2", "kind": "token_latency", "time": format_time(began), "host": "node-1",
                          "attrs": {"tokens": 1}})
    assert not probe.attributable(no_gap) and probe.enrich(no_gap) == no_gap
