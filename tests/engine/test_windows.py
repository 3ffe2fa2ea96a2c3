"""Correlations and counts in event-time windows, and facts leaving the engine once no window can use them."""

from __future__ import annotations

from engine_support import CORRELATION

from gpuslo.engine.runtime import RuleEvaluator

COUNT = """\
- id: oom-storm
  title: OOM storm
  slo: token-latency
  severity: critical
  when: {count: 3, event: cuda_oom, same: [host, gpu], within: 5m}
  group_by: [host, gpu]
  summary: storm
  remediation: r
"""


def _runner(book):
    runner = RuleEvaluator(lateness_s=10)
    runner.load([book])
    return runner


def test_correlation_fires_within_window_on_same_gpu_and_explains_the_chain(rulebook, event):
    runner = _runner(rulebook(CORRELATION))
    frag = event("mem_fragmentation", at=1.2, gpu=3, fragmentation_ratio=0.71)
    other_gpu = event("token_stall", at=2.0, gpu=4, gap_ms=640.0)
    stall = event("token_stall", at=3.0, gpu=3, gap_ms=640.0)
    matches = runner.evaluate([frag, other_gpu, stall])
    assert [m.rule_id for m in matches] == ["frag-then-stall"]
    chain = matches[0].explanation.chain
    assert [link.event_id for link in chain] == [frag.id, stall.id]
    assert chain[1].delay_s == 1.8
    assert "gap_ms=640" in chain[1].text and "fragmentation_ratio=0.71" in chain[0].text
    texts = [c.text for c in matches[0].explanation.conditions]
    assert "fragmentation_ratio = 0.71 > 0.65" in texts and "gap_ms = 640 >= 200ms" in texts
    assert matches[0].group_key == "host=node-7,gpu=3"


def test_correlation_outside_window_or_out_of_order_does_not_fire(rulebook, event):
    runner = _runner(rulebook(CORRELATION))
    assert runner.evaluate([event("mem_fragmentation", at=0, gpu=3, fragmentation_ratio=0.8),
                            event("token_stall", at=61, gpu=3, gap_ms=300.0)]) == []
    runner = _runner(rulebook(CORRELATION))
    assert runner.evaluate([event("token_stall", at=0, gpu=3, gap_ms=300.0),
                            event("mem_fragmentation", at=5, gpu=3, fragmentation_ratio=0.8)]) == []


def test_late_event_within_lateness_still_correlates(rulebook, event):
    runner = _runner(rulebook(CORRELATION))
    stall = event("token_stall", at=20, gpu=3, gap_ms=300.0)
    frag = event("mem_fragmentation", at=15, gpu=3, fragmentation_ratio=0.8)  # arrives after the stall
    assert [m.rule_id for m in runner.evaluate([stall, frag])] == ["frag-then-stall"]


def test_count_fires_on_the_third_in_window_with_all_as_evidence(rulebook, event):
    runner = _runner(rulebook(COUNT))
    ooms = [event("cuda_oom", at=t, gpu=3) for t in (0, 100, 200)]
    assert runner.evaluate(ooms[:2]) == []
    matches = runner.evaluate([event("cuda_oom", at=150, gpu=4), ooms[2]])
    assert [m.rule_id for m in matches] == ["oom-storm"]
    assert sorted(e.id for e in matches[0].explanation.evidence) == sorted(e.id for e in ooms)


def test_count_outside_window_does_not_fire(rulebook, event):
    runner = _runner(rulebook(COUNT))
    assert runner.evaluate([event("cuda_oom", at=t, gpu=3) for t in (0, 200, 400)]) == []


def test_facts_leave_the_engine_after_window_and_lateness(rulebook, event):
    runner = _runner(rulebook(CORRELATION))
    runner.evaluate([event("mem_fragmentation", at=t, gpu=t % 8, fragmentation_ratio=0.9) for t in range(50)])
    assert runner.pending_facts() == 50
    runner.evaluate([event("mem_fragmentation", at=200, gpu=1, fragmentation_ratio=0.9)])
    assert runner.pending_facts() == 1  # only the newest is young enough for a window


ABSENCE = """\
- id: probe-silent
  title: Probe silent
  slo: token-latency
  severity: warning
  when: {absent: probe_status, if: "state == 'up'", same: [host], for: 2m}
  group_by: [host]
  summary: "no heartbeat from {{ group.host }}"
  remediation: r
"""


def test_absence_fires_once_per_key_after_the_silence_and_rearms(rulebook, event):
    runner = _runner(rulebook(ABSENCE))
    assert runner.evaluate([event("probe_status", at=0, host="a", probe="ebpf", state="up"),
                            event("probe_status", at=0, host="b", probe="ebpf", state="up"),
                            event("probe_status", at=100, host="b", probe="ebpf", state="up")]) == []
    matches = runner.evaluate([event("cuda_error", at=150, host="c")])  # time moves on; a's heartbeat is 150 s old
    assert [(m.rule_id, m.group_key) for m in matches] == [("probe-silent", "host=a")]
    assert matches[0].explanation.conditions[0].text.startswith("no probe_status where state == 'up' for 150s > 120s")
    assert matches[0].summary == "no heartbeat from a"
    assert runner.evaluate([event("cuda_error", at=160, host="c")]) == []  # fired once
    assert [m.group_key for m in runner.evaluate([event("cuda_error", at=230, host="c")])] == ["host=b"]
    heartbeat = event("probe_status", at=240, host="a", probe="ebpf", state="up")
    runner.evaluate([heartbeat])
    assert runner.tick(now=heartbeat.timestamp + 60) == []
    assert [m.group_key for m in runner.tick(now=heartbeat.timestamp + 160)] == ["host=a"]


def test_absence_ignores_events_that_do_not_match_its_condition(rulebook, event):
    runner = _runner(rulebook(ABSENCE))
    runner.evaluate([event("probe_status", at=0, host="a", probe="ebpf", state="up")])
    matches = runner.evaluate([event("probe_status", at=130, host="a", probe="ebpf", state="down")])
    assert [m.group_key for m in matches] == ["host=a"]


def test_reload_keeps_window_state_of_unchanged_rules_only(rulebook, event):
    runner = _runner(rulebook(CORRELATION + COUNT))
    runner.evaluate([event("mem_fragmentation", at=0, gpu=3, fragmentation_ratio=0.9),
                     event("cuda_oom", at=0, gpu=3), event("cuda_oom", at=1, gpu=3)])
    changed_count = COUNT.replace("count: 3", "count: 4")
    runner.load([rulebook(CORRELATION + changed_count)])  # a new version: correlation unchanged, count changed
    matches = runner.evaluate([event("token_stall", at=2, gpu=3, gap_ms=300.0), event("cuda_oom", at=2, gpu=3)])
    assert [m.rule_id for m in matches] == ["frag-then-stall"]  # the count restarted from zero


def test_absence_ended_by_a_late_heartbeat_is_still_reported(rulebook, event):
    runner = _runner(rulebook(ABSENCE))
    runner.evaluate([event("probe_status", at=0, host="a", probe="ebpf", state="up")])
    matches = runner.evaluate([event("probe_status", at=300, host="a", probe="ebpf", state="up")])
    assert [(m.rule_id, m.group_key) for m in matches] == [("probe-silent", "host=a")]
    assert matches[0].explanation.conditions[0].observed == 300.0
