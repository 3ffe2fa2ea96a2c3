"""A bad `after:` of an absence is refused with its file:line:col, rule id, field and a hint."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_support import rulebook_text

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rulebook import load_rulebook_text, rulebook_json_schema
from gpuslo.engine.rulebook.model import ARM_ALIAS, Absence

# Line 14 of the rulebook is the `after:` line; its `{` is at column 14.
RULE = """\
- id: ftm
  title: No first token
  slo: token-latency
  severity: error
  when:
    absent: token_request
    if: "phase != 'start'"
    after: {event: token_request, if: "phase == 'start'"}
    same: [host, request_id]
    for: 10s
  group_by: [host, endpoint]
  summary: s
  remediation: r
"""
AFTER = "after: {event: token_request, if: \"phase == 'start'\"}"


def problems(rules: str) -> list[str]:
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(rulebook_text(rules), "t.yaml")
    return [str(p) for p in caught.value.problems]


def test_a_good_after_builds_the_arming_pattern():
    (rule,) = load_rulebook_text(rulebook_text(RULE), "t.yaml").rules
    assert isinstance(rule.when, Absence) and rule.when.for_s == 10.0
    after = rule.when.after
    assert after is not None and (after.kind, after.alias, str(after.condition)) == (
        "token_request", ARM_ALIAS, "phase == 'start'")
    assert rule.when.same == ("host", "request_id")


@pytest.mark.parametrize(("bad", "expected"), [
    (AFTER.replace("event: token_request", "event: token_requets"),
     "t.yaml:14:22: rule \"ftm\": unknown event kind 'token_requets' (did you mean 'token_request'?)"),
    (AFTER.replace("'start'", "start"),
     "t.yaml:14:51: rule \"ftm\": expected a value (number, 'string', 1GiB, 200ms) after 'phase', found 'start' "
     "(quote strings: 'start')"),
    (AFTER.replace("phase ==", "phaze =="),
     "t.yaml:14:42: rule \"ftm\": unknown field 'phaze' for event token_request (did you mean 'phase'?)"),
    ("after: 10s",
     "t.yaml:14:14: rule \"ftm\": 'after' must be a mapping, got '10s' (after: {event: KIND, if: CONDITION} "
     "names the arming event; the time it allows is 'for')"),
    (AFTER.replace("event: token_request, ", ""),
     "t.yaml:14:14: rule \"ftm\": missing required field 'event' (after: {event: KIND, if: CONDITION})"),
    (AFTER.replace("event: token_request,", "event: token_request, within: 5s,"),
     "t.yaml:14:37: rule \"ftm\": unknown field 'within' (allowed: event, if)"),
])
def test_bad_after_is_reported_where_it_is_written(bad, expected):
    assert problems(RULE.replace(AFTER, bad)) == [expected]


def test_after_without_for_says_what_for_means_here():
    assert problems(RULE.replace("    for: 10s\n", "")) == [
        "t.yaml:12:7: rule \"ftm\": an absence (absent:) needs 'for' "
        "(e.g. 'for: 10s': how long after the 'after' event the absent event may take)"]


def test_same_needs_fields_of_both_events_and_group_by_those_of_the_arming_event():
    cross = RULE.replace(AFTER, "after: {event: gpu_xid}")
    assert problems(cross) == [
        "t.yaml:15:20: rule \"ftm\": unknown field 'request_id' for event gpu_xid in 'same'",
        "t.yaml:17:22: rule \"ftm\": unknown field 'endpoint' for event gpu_xid in 'group_by'"]
    # group_by names the arming event's fields only: `probe` exists on the expected kind, not on gpu_xid
    heartbeat_group = RULE.replace(AFTER, "after: {event: gpu_xid}").replace("absent: token_request",
                                                                            "absent: probe_status")
    heartbeat_group = heartbeat_group.replace('if: "phase != \'start\'"', 'if: "state == \'up\'"')
    heartbeat_group = heartbeat_group.replace("[host, request_id]", "[host]").replace("[host, endpoint]",
                                                                                    "[host, probe]")
    assert problems(heartbeat_group) == [
        "t.yaml:17:22: rule \"ftm\": unknown field 'probe' for event gpu_xid in 'group_by'"]


def test_after_belongs_to_absences_only():
    count = """\
- id: c
  title: t
  slo: token-latency
  severity: error
  when: {count: 3, event: cuda_oom, within: 5m, after: {event: cuda_oom}}
  summary: s
  remediation: r
"""
    assert problems(count) == ["t.yaml:11:51: rule \"c\": 'after' does not apply to a count"]


def test_every_trigger_field_is_documented():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rulebooks.md").read_text(encoding="utf-8")
    defs = rulebook_json_schema()["$defs"]
    fields = [*defs["when"]["properties"], *defs["arming"]["properties"]]
    assert "after" in fields and [f for f in fields if f"`{f}:" not in doc] == []
