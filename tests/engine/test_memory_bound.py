"""Bounded memory: events that never complete a correlation or a count leave the windows once no rule can use them.

Resident memory itself is measured by bench/engine.py (part e); here the held events are counted exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from types import MappingProxyType

from engine_support import CORRELATION, T0

from gpuslo.engine.events import Event
from gpuslo.engine.runtime import RuleEvaluator

WITHIN_S, LATENESS_S, STEP_S = 60.0, 10.0, 0.01


COUNT = """\
- id: oom-storm
  title: OOM storm
  slo: token-latency
  severity: critical
  when: {count: 3, event: cuda_oom, same: [host, gpu], within: 60s}
  group_by: [host, gpu]
  summary: storm
  remediation: r
"""


def _unpaired(kind: str, count: int, attrs: dict[str, float]) -> Iterator[Event]:
    """Events on ever-new host/GPU pairs, STEP_S apart: none can ever pair or reach a count."""
    for i in range(count):
        yield Event(id=f"{kind}-{i}", kind=kind, time=T0 + timedelta(seconds=i * STEP_S), host=f"node-{i // 8}",
                    gpu=i % 8, attrs=MappingProxyType(attrs))


def _feed(evaluator: RuleEvaluator, events: Iterator[Event], batch: int = 500) -> tuple[int, int]:
    """Evaluate in runtime-sized batches, checking the bound after each; returns (events fed, matches)."""
    bound = int((WITHIN_S + LATENESS_S) / STEP_S) + 1
    fed, matches, pending = 0, 0, []
    for event in events:
        pending.append(event)
        if len(pending) == batch:
            matches += len(evaluator.evaluate(pending))
            fed, pending = fed + batch, []
            if fed % (20 * batch) == 0:  # counting is a walk over every window: often enough, not every batch
                assert evaluator.pending_facts() <= bound, f"after {fed} events"
    matches += len(evaluator.evaluate(pending))
    return fed + len(pending), matches


def _inside_horizon(count: int) -> int:
    """How many of the events fall within window + lateness of the newest one (the ones a rule may still use)."""
    newest = (count - 1) * STEP_S
    return sum(1 for i in range(count) if i * STEP_S >= newest - (WITHIN_S + LATENESS_S))


def test_200k_never_completing_correlation_events_keep_only_the_window(rulebook):
    evaluator = RuleEvaluator(lateness_s=LATENESS_S)
    evaluator.load([rulebook(CORRELATION)])
    fed, matches = _feed(evaluator, _unpaired("mem_fragmentation", 200_000, {"fragmentation_ratio": 0.8}))
    assert (fed, matches) == (200_000, 0)
    assert evaluator.pending_facts() == _inside_horizon(200_000) == 7001


def test_never_reached_counts_keep_only_the_window(rulebook):
    evaluator = RuleEvaluator(lateness_s=LATENESS_S)
    evaluator.load([rulebook(COUNT)])
    fed, matches = _feed(evaluator, _unpaired("cuda_oom", 20_000, {}))
    assert (fed, matches) == (20_000, 0)
    assert evaluator.pending_facts() == _inside_horizon(20_000)


def test_held_events_still_complete_a_correlation_once_their_partner_arrives(rulebook):
    """The bound does not cost matches: an event inside the horizon still pairs."""
    evaluator = RuleEvaluator(lateness_s=LATENESS_S)
    evaluator.load([rulebook(CORRELATION)])
    _feed(evaluator, _unpaired("mem_fragmentation", 10_000, {"fragmentation_ratio": 0.8}))
    last = 9_999
    stall = Event(id="stall-1", kind="token_stall", time=T0 + timedelta(seconds=last * STEP_S + 1.0),
                  host=f"node-{last // 8}", gpu=last % 8, attrs=MappingProxyType({"gap_ms": 640.0}))
    early = Event(id="stall-0", kind="token_stall", time=T0 + timedelta(seconds=last * STEP_S + 1.0),
                  host="node-0", gpu=0, attrs=MappingProxyType({"gap_ms": 640.0}))
    matches = evaluator.evaluate([early, stall])
    assert [(m.rule_id, m.group_key) for m in matches] == [("frag-then-stall", f"host=node-{last // 8},gpu={last % 8}")]
