"""The durable_rules behaviours the runtime is built around, checked on the real engine.

If one of these starts failing after an engine upgrade, the matching workaround in engine/runtime.py or
engine/rulebook/compile.py can be revisited.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from durable import engine

from gpuslo.engine.errors import EventError
from gpuslo.engine.events import parse_event
from gpuslo.engine.matcher import definition
from gpuslo.engine.plan import plan_rulebook
from gpuslo.engine.rulebook import load_directory


class _Host(engine.Host):
    def __init__(self, fired: list[str]):
        self.fired = fired
        super().__init__()

    def get_action(self, action_name):
        return lambda c: self.fired.append(action_name)


def _host(name: str, rules: dict) -> tuple[_Host, list[str]]:
    fired: list[str] = []
    host = _Host(fired)
    host.set_rulesets({name: copy.deepcopy(rules)})  # the engine pops "run" from what it is given
    return host, fired


OVERLAP = {
    "high": {"all": [{"m": {"$and": [{"kind": "frag"}, {"$gt": {"ratio": 0.65}}]}}], "run": "high"},
    "any": {"all": [{"m": {"$and": [{"kind": "frag"}]}}], "run": "any"},
}


def test_an_event_fires_only_one_of_two_matching_rules_but_a_fact_fires_both():
    host, fired = _host("edge_overlap", OVERLAP)
    host.post("edge_overlap", {"id": "e1", "sid": "0", "kind": "frag", "ratio": 0.9})
    assert len(fired) == 1  # why the runtime asserts facts instead of posting events
    fired.clear()
    host.assert_fact("edge_overlap", {"id": "f1", "sid": "0", "kind": "frag", "ratio": 0.9})
    assert sorted(fired) == ["any", "high"]


def test_strings_compare_with_numbers_so_events_are_typed_before_the_engine():
    host, fired = _host("edge_types", {"high": OVERLAP["high"]})
    host.assert_fact("edge_types", {"id": "f1", "sid": "0", "kind": "frag", "ratio": "abc"})
    assert fired == ["high"]  # "abc" > 0.65 holds inside the engine
    with pytest.raises(EventError, match="attrs.fragmentation_ratio: '0.1' is not of type 'number'"):
        parse_event({"id": "x", "kind": "mem_fragmentation", "time": "2026-01-01T00:00:00Z", "host": "h",
                     "attrs": {"fragmentation_ratio": "0.1"}})


def test_engine_regex_has_no_escapes_so_text_tests_run_in_python():
    host, fired = _host("edge_regex", {"r": {"all": [{"m": {"$mt": {"msg": ".*a\\\\.b.*"}}}], "run": "r"}})
    with pytest.raises(engine.MessageNotHandledException):
        host.assert_fact("edge_regex", {"id": "f1", "sid": "0", "msg": "xa.bx"})
    assert fired == []


def test_compiled_patterns_always_start_with_kind_under_and():
    # A pattern whose top level is `$or` hung assert_fact forever (seen while building the compiler).
    rulebooks, problems = load_directory(Path("rules"))
    assert problems == ()
    for rulebook in rulebooks:
        for rule in definition(plan_rulebook(rulebook)).values():
            for pattern in rule["all"]:
                (body,) = pattern.values()
                assert list(body) == ["$and"] and "kind" in body["$and"][0], json.dumps(rule)


def test_compiled_rules_never_join_inside_the_engine():
    # Joins that test a field of an earlier pattern crashed the C core (SIGSEGV in reduceExpressionSequence);
    # every compiled engine rule has exactly one pattern, and windows are joined by the runtime.
    rulebooks, _ = load_directory(Path("rules"))
    for rulebook in rulebooks:
        for rule in definition(plan_rulebook(rulebook)).values():
            assert len(rule["all"]) == 1
