"""`resolve: {event, if}`: a clearing event yields a Clear for its group, and the service resolves the violation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine_support import rulebook_text

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.store import audit, repository
from gpuslo.engine.store.engine_output import in_evaluation_order
from gpuslo.engine.store.read_models import ViolationFilter
from gpuslo.engine.violations import Clear

RULES = """\
- id: frag-high
  title: Fragmentation high
  slo: token-latency
  severity: warning
  when: {event: mem_fragmentation, if: fragmentation_ratio > 0.65}
  group_by: [host, gpu]
  summary: "FR {{ event.attrs.fragmentation_ratio }}"
  remediation: defragment
  resolve: {event: mem_fragmentation, if: "fragmentation_ratio < 0.35"}
"""


def test_a_clearing_event_yields_a_clear_for_its_group(rulebook, event):
    runner = RuleEvaluator()
    runner.load([rulebook(RULES)])
    high = event("mem_fragmentation", 0.0, gpu=3, fragmentation_ratio=0.71)
    other_gpu = event("mem_fragmentation", 1.0, gpu=2, fragmentation_ratio=0.10)
    middling = event("mem_fragmentation", 2.0, gpu=3, fragmentation_ratio=0.50)
    low = event("mem_fragmentation", 3.0, gpu=3, fragmentation_ratio=0.20)
    result = runner.evaluate_batch([high, other_gpu, middling, low])
    assert [(m.rule_id, m.group_key) for m in result.matches] == [("frag-high", "host=node-7,gpu=3")]
    # gpu 2 clears its own (absent) group, never gpu 3's; FR 0.50 is neither high nor low.
    assert [(c.rule_id, c.rulebook, c.group_key, c.event.id) for c in result.clears] == [
        ("frag-high", "t", "host=node-7,gpu=2", other_gpu.id), ("frag-high", "t", "host=node-7,gpu=3", low.id)]
    assert runner.evaluate([low]) == []  # the match-only API drops clears
    assert runner.evaluate_batch([middling]).clears == ()


def _frag(i: int, second: int, ratio: float, gpu: int = 3) -> dict:
    return {"id": f"frag-{i}", "kind": "mem_fragmentation", "time": f"2026-11-29T12:00:{second:02d}Z",
            "host": "node-7", "gpu": gpu, "attrs": {"fragmentation_ratio": ratio}}


def _violations(core: Gpuslo):
    with core.database.session(readonly=True) as session:
        return repository.list_violations(session, ViolationFilter()).items


def test_the_service_resolves_the_violation_on_a_clearing_event(database, tmp_path: Path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "t.yaml").write_text(rulebook_text(RULES))
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules))
    try:
        core.ingest([_frag(1, 1, 0.71), _frag(2, 2, 0.80, gpu=2)])
        assert core.wait_idle()
        assert sorted(v.status for v in _violations(core)) == ["open", "open"]
        core.lifecycle.acknowledge(next(v.id for v in _violations(core) if v.group["gpu"] == 3), actor="carol")
        core.ingest([_frag(3, 3, 0.50), _frag(4, 4, 0.20)])  # only the low one clears, and only gpu 3
        assert core.wait_idle()
        by_gpu = {v.group["gpu"]: v for v in _violations(core)}
        assert (by_gpu[3].status, by_gpu[3].resolved_by, by_gpu[2].status) == ("resolved", "engine", "open")
        with core.database.session(readonly=True) as session:
            history = repository.get_violation(session, by_gpu[3].id).history
            rows = audit.list_audit(session, audit.AuditFilter(action="resolve")).items
        (line,) = [h for h in history if h.action == "resolved"]
        assert (line.actor, line.status_before, line.status_after) == ("engine", "acknowledged", "resolved")
        assert (line.detail["reason"], line.detail["event_id"]) == ("cleared", "frag-4")
        assert [(r.actor, r.target_type, r.target_id, r.after) for r in rows] == [
            ("engine", "violation", str(by_gpu[3].id), {"status": "resolved"})]
        # A match after the clear opens the group again (reopen within the flap window).
        core.ingest([_frag(5, 5, 0.90)])
        assert core.wait_idle()
        assert {v.group["gpu"]: v.status for v in _violations(core)}[3] == "open"
        core.ingest([_frag(6, 4, 0.10)])  # late: older than the match it would clear, so it clears nothing
        assert core.wait_idle()
        assert {v.group["gpu"]: v.status for v in _violations(core)}[3] == "open"
    finally:
        core.close()


def test_a_clear_then_a_match_in_one_batch_resolve_and_reopen_as_across_two(database, tmp_path: Path):
    """The engine's output is stored in evaluation order: a clear followed by a match of its group in one batch
    resolves the violation and the match reopens it (they were folded into the open violation before); a
    clearing event older than the match before it still clears nothing."""
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "t.yaml").write_text(rulebook_text(RULES))
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules))
    try:
        core.ingest([_frag(1, 1, 0.71), _frag(2, 2, 0.20), _frag(3, 3, 0.90)])  # one engine batch
        assert core.wait_idle()
        (violation,) = _violations(core)
        assert (violation.status, violation.occurrences, violation.flaps) == ("open", 2, 1)
        with core.database.session(readonly=True) as session:
            history = repository.get_violation(session, violation.id).history
        assert [(h.action, h.status_before, h.status_after) for h in history] == [
            ("created", None, "open"), ("resolved", "open", "resolved"), ("reopened", "resolved", "open")]
        assert history[1].detail["event_id"] == "frag-2"
        core.ingest([_frag(4, 6, 0.95), _frag(5, 5, 0.10)])  # the clear is late: older than the match before it
        assert core.wait_idle()
        (violation,) = _violations(core)
        assert (violation.status, violation.occurrences) == ("open", 3)
    finally:
        core.close()


def test_in_evaluation_order_places_each_clear_after_the_matches_of_events_before_it(rulebook, event):
    runner = RuleEvaluator()
    runner.load([rulebook(RULES)])
    events = [event("mem_fragmentation", float(i), gpu=3, fragmentation_ratio=ratio)
              for i, ratio in enumerate((0.71, 0.20, 0.90, 0.10))]
    result = runner.evaluate_batch(events)
    ordered = in_evaluation_order(result)
    assert [(type(item).__name__, item.event.id if isinstance(item, Clear) else item.seen_at) for item in ordered] \
        == [("Match", events[0].time), ("Clear", events[1].id), ("Match", events[2].time), ("Clear", events[3].id)]
    without_events = replace(result, events=())  # a fleet worker's merged result: clears after the matches
    assert [type(item).__name__ for item in in_evaluation_order(without_events)] == ["Match", "Match", "Clear",
                                                                                     "Clear"]
