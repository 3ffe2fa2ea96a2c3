"""The prefilter (engine/prefilter.py) against the real durable_rules core: an event it skips is one no pattern
takes, on generated values of every shape (missing, int, float, huge int, bool, numeric text, NaN); its
generated source agrees with the test-by-test reading; and the evaluator's matches are the same with it and
without it on the benchmark's mixed stream."""

from __future__ import annotations

import math
import random
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuslo.engine import matcher
from gpuslo.engine.events import Event
from gpuslo.engine.facts import FactFields, make_fact
from gpuslo.engine.plan import plan_rulebook
from gpuslo.engine.prefilter import Prefilter
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, tzinfo=UTC)
RULES = """\
- id: numbers
  title: Numbers
  slo: token-latency
  severity: info
  when: {event: token_latency, if: "itl_p99_ms > 500 and tokens >= 3"}
  summary: s
  remediation: r
- id: either
  title: Either
  slo: token-latency
  severity: info
  when: {event: token_latency, if: "itl_p99_ms < 10 or endpoint == 'chat'"}
  summary: s
  remediation: r
- id: texts
  title: Texts
  slo: token-latency
  severity: info
  when: {event: cuda_error, if: "error_name == 'cudaErrorIllegalAddress' and gpu != 3 and rank <= 2"}
  summary: s
  remediation: r
- id: negated
  title: Negated
  slo: token-latency
  severity: info
  when: {event: cuda_error, if: "not (error_code < 700) and labels.zone != 'eu' and error_name contains 'Illegal'"}
  summary: s
  remediation: r
- id: listed
  title: Listed
  slo: token-latency
  severity: info
  when: {event: gpu_xid, if: "xid in [48, 63] and has gpu"}
  summary: s
  remediation: r
- id: ratio
  title: Ratio
  slo: token-latency
  severity: info
  when: {event: mem_fragmentation, if: "fragmentation_ratio >= 0.65"}
  summary: s
  remediation: r
"""
VALUES = (None, 0, 3, 2, 9, 499, 500, 501, 700, 699, 0.5, 0.65, 0.649999, 500.0, 2 ** 60, -2 ** 60, True, False,
          "600", "chat", "cudaErrorIllegalAddress", "cudaErrorIllegalInstruction", "eu", "us", math.nan, math.inf,
          -math.inf, 1e300, 1e-7, 2e20)
FIELDS = {"token_latency": ("itl_p99_ms", "tokens", "endpoint"), "cuda_error": ("error_name", "error_code"),
          "gpu_xid": ("xid",), "mem_fragmentation": ("fragmentation_ratio",)}


def _event(rng: random.Random, kind: str, number: int) -> Event:
    attrs = {name: value for name in FIELDS[kind] if (value := rng.choice(VALUES)) is not None}
    envelope = {name: value for name in ("gpu", "rank") if (value := rng.choice((None, 0, 2, 3, 5))) is not None}
    labels = {"zone": zone} if (zone := rng.choice((None, "eu", "us"))) else {}
    return Event(id=f"e{number}", kind=kind, time=T0, host="n", labels=labels, attrs=attrs, **envelope)


def _units(rulebooks):
    for rulebook in rulebooks:
        plan = plan_rulebook(rulebook, ruleset=matcher.unique_name(f"pf-{rulebook.name}"))
        fields = FactFields.of(plan)
        yield plan, matcher.register_plan(plan), fields, Prefilter(plan, fields)


def _taken(plan, ruleset, fields, event: Event) -> bool:
    fact = make_fact(event, plan, fields, event.timestamp)
    text = matcher.encode(fact)
    fired = matcher.assert_fact(ruleset, text)
    if fired is None:
        return False
    matcher.retract_fact(ruleset, text)
    return True


def test_an_event_the_prefilter_skips_is_taken_by_no_pattern_of_the_real_core(rulebook):
    rng = random.Random(7)
    skipped = asserted = 0
    for plan, ruleset, fields, prefilter in _units([rulebook(RULES, "pf")]):
        for number in range(6000):
            event = _event(rng, rng.choice(sorted(plan.kinds)), number)
            may = prefilter.may_match(event)
            assert may == prefilter.may_match_slowly(event), event
            if not may:
                skipped += 1
                assert not _taken(plan, ruleset, fields, event), event  # the core would have refused it too
            else:
                asserted += 1
    assert skipped > 800 and asserted > 800, (skipped, asserted)  # both answers are exercised


def test_a_pattern_with_nothing_the_prefilter_can_judge_is_always_asserted(rulebook):
    rules = RULES.replace('"itl_p99_ms < 10 or endpoint == \'chat\'"', "null").replace(
        "when: {event: token_latency, if: null}", "when: {event: token_latency}")
    (plan, _ruleset, _fields, prefilter), = _units([rulebook(rules, "pf2")])
    rng = random.Random(3)
    assert all(prefilter.may_match(_event(rng, "token_latency", n)) for n in range(500))
    assert "token_latency" not in prefilter.patterns and "cuda_error" in prefilter.patterns


def test_the_shipped_rulebooks_skip_only_what_the_core_refuses():
    sys.path.insert(0, str(ROOT / "bench"))
    import engine_workload as workload

    rulebooks = load_directory(ROOT / "rules")[0]
    events = [workload.to_event(item) for item in workload.mixed(6000, seed=11)]
    skipped = 0
    for plan, ruleset, fields, prefilter in _units(rulebooks):
        for event in events:
            if event.kind in plan.kinds and not prefilter.may_match(event):
                skipped += 1
                assert not _taken(plan, ruleset, fields, event), (plan.rulebook.name, event)
    assert skipped > 1000, skipped


def _matches(rulebooks, events):
    runner = RuleEvaluator()
    runner.load(rulebooks)
    found = []
    for start in range(0, len(events), 500):
        found += [(m.rule_id, m.group_key, m.seen_at, m.summary, tuple(e.id for e in m.explanation.evidence))
                  for m in runner.evaluate(events[start:start + 500])]
    return found


def test_the_evaluator_matches_the_same_with_and_without_the_prefilter(monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import engine_workload as workload

    rulebooks = load_directory(ROOT / "rules")[0]
    events = [workload.to_event(item) for item in workload.mixed(8000, seed=5)]
    with_prefilter = _matches(rulebooks, events)
    monkeypatch.setattr(Prefilter, "may_match", lambda self, event: True)
    without = _matches(rulebooks, events)
    assert with_prefilter == without
    assert len(with_prefilter) > 100


@pytest.mark.parametrize("value", [True, "600", math.nan, 2 ** 60])
def test_values_the_core_may_read_otherwise_are_left_to_it(rulebook, value):
    (_plan, _ruleset, _fields, prefilter), = _units([rulebook(RULES.split("- id: either")[0], "pf3")])
    event = Event(id="e", kind="token_latency", time=T0, host="n", attrs={"itl_p99_ms": value, "tokens": 5})
    assert prefilter.may_match(event)
