"""Rule options repeat_interval, flap_window and resolve (after, event/if): parsed, errors located."""

from __future__ import annotations

import pytest

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.rulebook.model import CLEAR_ALIAS, Lifecycle

HEAD = """rulebook: memory
version: "1"
slos:
  avail: {service: serving, sli: ok requests, objective: 99.9%, window: 30d}
rules:
  - id: frag-high
    title: Fragmentation is high
    slo: avail
    severity: warning
    when: {event: mem_fragmentation, if: fragmentation_ratio > 0.65}
    summary: high
    remediation: restart
"""


def test_defaults_when_absent():
    rule = load_rulebook_text(HEAD, "memory.yaml").rules[0]
    assert rule.lifecycle == Lifecycle(repeat_interval_s=14400.0, flap_window_s=600.0, resolve_after_s=None)


def test_options_are_parsed():
    text = HEAD + "    repeat_interval: 30m\n    flap_window: 5m\n    resolve:\n      after: 10m\n"
    rule = load_rulebook_text(text, "memory.yaml").rules[0]
    assert rule.lifecycle == Lifecycle(repeat_interval_s=1800.0, flap_window_s=300.0, resolve_after_s=600.0)


def test_clearing_event_is_parsed():
    text = HEAD + ("    resolve:\n      after: 30m\n      event: mem_fragmentation\n"
                   "      if: fragmentation_ratio < 0.35\n")
    lifecycle = load_rulebook_text(text, "memory.yaml").rules[0].lifecycle
    assert lifecycle.resolve_after_s == 1800.0
    clear = lifecycle.resolve_when
    assert (clear.kind, clear.alias, clear.condition_text, str(clear.condition)) == (
        "mem_fragmentation", CLEAR_ALIAS, "fragmentation_ratio < 0.35", "fragmentation_ratio < 0.35")


def test_clearing_event_without_condition_or_quiet_period():
    text = HEAD + "    resolve: {event: mem_fragmentation}\n"
    lifecycle = load_rulebook_text(text, "memory.yaml").rules[0].lifecycle
    assert lifecycle.resolve_after_s is None
    assert (lifecycle.resolve_when.kind, lifecycle.resolve_when.condition) == ("mem_fragmentation", None)


@pytest.mark.parametrize(("extra", "expected"), [
    ("    repeat_interval: 4 hours\n", "memory.yaml:13:22: rule \"frag-high\": '4 hours': unknown duration unit"),
    ("    flap_window: 0s\n", "memory.yaml:13:18: rule \"frag-high\": 'flap_window' must be above 0"),
    ("    resolve:\n      after: 30d\n", "memory.yaml:14:14: rule \"frag-high\": 'after' must be above 0 and at most"),
    ("    resolve:\n      aftr: 10m\n", "memory.yaml:14:7: rule \"frag-high\": unknown field 'aftr' (did you mean"),
    ("    resolve:\n      evnt: mem_fragmentation\n", "memory.yaml:14:7: rule \"frag-high\": unknown field 'evnt'"),
    ("    resolve: {}\n", "memory.yaml:13:5: rule \"frag-high\": 'resolve' needs 'after', 'event' or both"),
    ("    resolve:\n      if: fragmentation_ratio < 0.35\n",
     "memory.yaml:14:7: rule \"frag-high\": 'if' in 'resolve' needs 'event'"),
    ("    resolve:\n      event: mem_fragmentaton\n",
     "memory.yaml:14:14: rule \"frag-high\": unknown event kind 'mem_fragmentaton'"),
    # The condition is type-checked against the clearing event's kind.
    ("    resolve:\n      event: mem_fragmentation\n      if: fragmentation_ratio < 'low'\n",
     "memory.yaml:15:33: rule \"frag-high\": 'fragmentation_ratio' is a number field; it cannot be compared"),
    ("    resolve:\n      event: mem_fragmentation\n      if: gap_ms < 10\n",
     "memory.yaml:15:11: rule \"frag-high\": unknown field 'gap_ms'"),
    # The default group_by is [host]; a clearing event needs every group_by field to name its violation.
    ("    group_by: [host, scope]\n    resolve:\n      event: token_latency\n",
     "memory.yaml:15:14: rule \"frag-high\": the clearing event token_latency has no field 'scope'"),
])
def test_bad_options_are_located(extra, expected):
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(HEAD + extra, "memory.yaml")
    assert any(str(p).startswith(expected) for p in caught.value.problems), [str(p) for p in caught.value.problems]


def test_a_correlation_pattern_cannot_take_the_clearing_alias():
    text = HEAD.replace(
        "    when: {event: mem_fragmentation, if: fragmentation_ratio > 0.65}\n",
        "    when:\n      all:\n        - {name: resolve, event: mem_fragmentation}\n"
        "        - {name: stall, event: token_stall}\n      same: [host]\n      within: 60s\n",
    ) + "    resolve: {event: mem_fragmentation}\n"
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(text, "memory.yaml")
    assert [str(p) for p in caught.value.problems] == [
        "memory.yaml:18:5: rule \"frag-high\": a rule with 'resolve: {event}' cannot name a pattern 'resolve' "
        "(the clearing pattern takes that name)"]
