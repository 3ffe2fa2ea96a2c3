"""The evaluator on the real durable_rules engine: which rules fire, on what, and what they explain."""

from __future__ import annotations

import json
import random

import pytest

from gpuslo.engine.explain import condition_holds
from gpuslo.engine.runtime import RuleEvaluator

FRAG_RULES = """\
- id: frag-high
  title: Fragmentation high
  slo: token-latency
  severity: warning
  when: {event: mem_fragmentation, if: fragmentation_ratio > 0.65}
  group_by: [host, gpu]
  summary: "FR {{ event.attrs.fragmentation_ratio }} on {{ event.host }} GPU {{ event.gpu }}"
  remediation: defragment
- id: frag-any
  title: Fragmentation sample
  slo: token-latency
  severity: info
  when: {event: mem_fragmentation}
  group_by: [host]
  summary: sample
  remediation: none
"""


def evaluator(*rulebooks):
    runner = RuleEvaluator()
    runner.load(rulebooks)
    return runner


def test_every_matching_rule_fires_on_one_event(rulebook, event):
    # durable_rules consumes an *event* at its first match; the runtime asserts facts so both rules fire.
    runner = evaluator(rulebook(FRAG_RULES))
    matches = runner.evaluate([event("mem_fragmentation", gpu=3, fragmentation_ratio=0.71)])
    assert sorted(m.rule_id for m in matches) == ["frag-any", "frag-high"]


def test_identical_events_each_fire(rulebook, event):
    # Without runtime-owned ids, equal content collides in the engine (MessageObservedException) and is lost.
    runner = evaluator(rulebook(FRAG_RULES))
    batch = [event("mem_fragmentation", gpu=3, fragmentation_ratio=0.9) for _ in range(5)]
    assert sum(m.rule_id == "frag-high" for m in runner.evaluate(batch)) == 5


def test_explanation_shows_observed_values_and_summary(rulebook, event):
    runner = evaluator(rulebook(FRAG_RULES))
    match = next(m for m in runner.evaluate([event("mem_fragmentation", gpu=3, fragmentation_ratio=0.71)])
                 if m.rule_id == "frag-high")
    texts = [c.text for c in match.explanation.conditions]
    assert texts == ["kind = mem_fragmentation", "fragmentation_ratio = 0.71 > 0.65"]
    assert all(c.holds for c in match.explanation.conditions)
    assert match.summary == "FR 0.71 on node-7 GPU 3"
    assert (match.group_key, match.severity, match.rulebook, match.slo) == ("host=node-7,gpu=3", "warning", "t",
                                                                            "token-latency")
    assert match.slo_objective == "p99 < 200 ms"
    assert [e.id for e in match.explanation.evidence] == [match.explanation.chain[0].event_id]


def test_summary_that_fails_to_render_falls_back_and_keeps_the_violation(rulebook, event):
    rules = FRAG_RULES.replace('"FR {{ event.attrs.fragmentation_ratio }} on {{ event.host }} GPU {{ event.gpu }}"',
                               '"{{ event.attrs.fragmentation_ratio / 0 }}"')
    runner = evaluator(rulebook(rules))
    match = next(m for m in runner.evaluate([event("mem_fragmentation", gpu=3, fragmentation_ratio=0.71)])
                 if m.rule_id == "frag-high")
    assert match.summary == "Fragmentation high (host=node-7,gpu=3)"


def test_sandbox_refuses_unsafe_templates(rulebook, event):
    rules = FRAG_RULES.replace('"FR {{ event.attrs.fragmentation_ratio }} on {{ event.host }} GPU {{ event.gpu }}"',
                               '"{{ event.__class__.__mro__ }}"')
    runner = evaluator(rulebook(rules))
    match = next(m for m in runner.evaluate([event("mem_fragmentation", gpu=1, fragmentation_ratio=0.8)])
                 if m.rule_id == "frag-high")
    assert "mro" not in match.summary and "class" not in match.summary


CONDITION_CASES = [
    "gap_ms >= 200ms",
    "not (gap_ms >= 200ms)",
    "gap_ms >= 200ms and endpoint == 'chat'",
    "gap_ms < 100 or endpoint in ['a', 'b']",
    "endpoint not in ['a', 'b']",
    "not (endpoint in ['a'] or gap_ms > 300)",
    "has request_id",
    "not has request_id",
    "endpoint contains 'ch'",
    "not (endpoint contains 'ch')",
    "request_id matches '^r-[0-9]+\\\\]$'",
    "labels.zone == 'eu'",
]


@pytest.mark.parametrize("condition", CONDITION_CASES)
def test_engine_and_explanation_agree(rulebook, event, condition):
    """The compiled ruleset fires exactly when every explained condition holds (missing fields included)."""
    quoted = json.dumps(condition)
    rules = f"""\
- id: stall
  title: Stall
  slo: token-latency
  severity: warning
  when: {{event: token_stall, if: {quoted}}}
  summary: s
  remediation: r
- id: every
  title: Every stall
  slo: token-latency
  severity: info
  when: {{event: token_stall}}
  summary: s
  remediation: r
"""
    book = rulebook(rules)
    runner = evaluator(book)
    pattern = book.rule("stall").when.pattern
    rng = random.Random(7)
    for _ in range(60):
        fields = {"gap_ms": rng.choice([50, 100, 150, 200, 250, 400]) * 1.0}
        if rng.random() < 0.7:
            fields["endpoint"] = rng.choice(["a", "b", "chat", "c"])
        if rng.random() < 0.5:
            fields["request_id"] = rng.choice(["r-12]", "r-1", "x"])
        if rng.random() < 0.5:
            fields["labels"] = {"zone": rng.choice(["eu", "us"])}
        ev = event("token_stall", **fields)
        fired = {m.rule_id for m in runner.evaluate([ev])}
        assert "every" in fired
        explained = condition_holds(pattern.condition, ev, {"m": ev})
        assert ("stall" in fired) == explained, (condition, ev.to_dict())


def test_text_tests_handle_characters_the_engine_regex_cannot(rulebook, event):
    quoted = json.dumps("error_name contains 'a]\\\\b\"c'")
    rules = f"""\
- id: weird
  title: Weird
  slo: token-latency
  severity: info
  when: {{event: cuda_error, if: {quoted}}}
  summary: s
  remediation: r
"""
    runner = evaluator(rulebook(rules))
    assert [m.rule_id for m in runner.evaluate([event("cuda_error", error_name='xa]\\b"cx')])] == ["weird"]
    assert runner.evaluate([event("cuda_error", error_name="abc")]) == []


def test_explanation_of_an_or_shows_the_branch_that_held(rulebook, event):
    rules = """\
- id: frag
  title: Fragmentation over a real pool
  slo: token-latency
  severity: warning
  when: {event: mem_fragmentation, if: "fragmentation_ratio > 0.65 and (not has free_bytes or free_bytes >= 1GiB)"}
  summary: s
  remediation: r
"""
    runner = evaluator(rulebook(rules))
    (match,) = runner.evaluate([event("mem_fragmentation", fragmentation_ratio=0.71, free_bytes=10 << 30)])
    assert [c.text for c in match.explanation.conditions] == [
        "kind = mem_fragmentation", "fragmentation_ratio = 0.71 > 0.65", "free_bytes = 10737418240 >= 1GiB"]
    (match,) = runner.evaluate([event("mem_fragmentation", fragmentation_ratio=0.71)])
    assert [c.text for c in match.explanation.conditions][-1] == "free_bytes is missing"
    assert all(c.holds for c in match.explanation.conditions)
