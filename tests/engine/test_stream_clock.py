"""The live engine checks absences on the stream's clock, not the wall clock: old events are not overdue on arrival."""

from __future__ import annotations

import threading
import time

from gpuslo.engine.engine_thread import Runtime
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.runtime import EngineResult, RuleEvaluator

SILENT_2S = """\
- id: probe-silent
  title: Probe silent
  slo: token-latency
  severity: warning
  when: {absent: probe_status, if: "state == 'up'", same: [host], for: 2s}
  group_by: [host]
  summary: "no heartbeat from {{ group.host }}"
  remediation: r
"""


def test_the_stream_clock_is_the_newest_event_time_running_on_once_the_stream_is_quiet(rulebook, event):
    runner = RuleEvaluator()
    runner.load([rulebook(SILENT_2S)])
    assert runner.stream_time(time.monotonic()) is None
    heartbeat = event("probe_status", at=0, host="a", probe="ebpf", state="up")
    runner.evaluate([heartbeat])
    arrived = time.monotonic()
    assert runner.stream_time(arrived) == heartbeat.timestamp  # still flowing: the stream's own time
    assert runner.stream_time(arrived + 0.9) == heartbeat.timestamp
    assert heartbeat.timestamp + 29 <= runner.stream_time(arrived + 30) < heartbeat.timestamp + 29.5


def test_a_heartbeat_from_long_ago_is_not_overdue_on_arrival_but_fires_after_the_silence(rulebook, event):
    """The events' dates are a year old: against the wall clock every heartbeat would be overdue at once
    (an agent shipping its spool after an outage, a replay into a live server)."""
    fired: list[str] = []
    got_one = threading.Event()

    def sink(result: EngineResult) -> None:
        fired.extend(m.rule_id for m in result.matches)
        if result.matches:
            got_one.set()

    runtime = Runtime(sink=sink, queue_size=100, metrics=Metrics())
    runtime.load([rulebook(SILENT_2S)])
    runtime.start()
    try:
        runtime.submit([event("probe_status", at=0, host="a", probe="ebpf", state="up")])
        assert runtime.wait_idle()
        submitted = time.monotonic()
        time.sleep(2.0)  # four idle checks of the engine thread (every 0.5 s), still within 2 s + 1 s grace
        assert fired == []
        assert got_one.wait(10.0), "the absence never fired"
        assert time.monotonic() - submitted >= 2.9
        assert fired == ["probe-silent"]
    finally:
        runtime.stop()
