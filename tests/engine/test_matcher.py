"""The matcher drives durable_rules' C core directly: every matching rule fires, in order, nothing is kept."""

from __future__ import annotations

import json

import pytest

from gpuslo.engine import matcher
from gpuslo.engine.errors import EngineError

_DEFINITION = {
    "r_high__m": {"all": [{"m": {"$and": [{"kind": "frag"}, {"$gt": {"fr": 0.65}}]}}], "run": "book|high|m"},
    "r_any__m": {"all": [{"m": {"$and": [{"kind": "frag"}]}}], "run": "book|any|m"},
}


@pytest.fixture()
def ruleset() -> matcher.Ruleset:
    return matcher.register(matcher.unique_name("test-matcher"), _DEFINITION)


def _fact(fact_id: str, **fields: object) -> str:
    return matcher.encode({"id": fact_id, "sid": "0", "kind": "frag", **fields})


def test_a_fact_fires_every_matching_rule_and_retracting_fires_nothing(ruleset: matcher.Ruleset) -> None:
    text = _fact("f1", fr=0.9)
    assert sorted(matcher.assert_fact(ruleset, text) or []) == ["book|any|m", "book|high|m"]
    assert matcher.retract_fact(ruleset, text) == []


def test_a_fact_below_the_threshold_fires_only_the_rule_it_matches(ruleset: matcher.Ruleset) -> None:
    text = _fact("f2", fr=0.5)
    assert matcher.assert_fact(ruleset, text) == ["book|any|m"]
    matcher.retract_fact(ruleset, text)


def test_a_fact_no_rule_takes_is_reported_as_none(ruleset: matcher.Ruleset) -> None:
    assert matcher.assert_fact(ruleset, matcher.encode({"id": "f3", "sid": "0", "kind": "other"})) is None


def test_a_pending_fact_with_the_same_id_is_a_collision_and_retracting_frees_the_id(ruleset: matcher.Ruleset) -> None:
    first = _fact("f4", fr=0.9)
    assert matcher.assert_fact(ruleset, first)
    with pytest.raises(matcher.IdCollision):
        matcher.assert_fact(ruleset, _fact("f4", fr=0.1))
    matcher.retract_fact(ruleset, first)
    again = _fact("f4", fr=0.1)
    assert matcher.assert_fact(ruleset, again) == ["book|any|m"]
    matcher.retract_fact(ruleset, again)


def test_a_definition_the_core_refuses_is_an_engine_error_naming_the_ruleset() -> None:
    name = matcher.unique_name("test-matcher-bad")
    with pytest.raises(EngineError, match=name):
        matcher.register(name, {"r__m": {"all": [{"m": {"$nonsense": {"x": 1}}}], "run": "a"}})


def test_ruleset_names_are_unique_in_the_process() -> None:
    assert matcher.unique_name("same") != matcher.unique_name("same")


@pytest.mark.parametrize("value", [1e-7, -3e-9, 1e16, 2e20, 1e300, 5e-324, 1.5e-7, 1e-5, 0.5, 123.0])
def test_floats_orjson_writes_with_a_bare_exponent_reach_the_core_in_facts_and_rulesets(value: float) -> None:
    # durable_rules' reader refuses `1e-7` (error 204) but takes `1.0e-7`: before, such a fact raised
    # EngineError (its event quarantined) and a rule with such a threshold did not load.
    low = matcher.register(matcher.unique_name("floats"), {
        "below": {"all": [{"m": {"$lte": {"x": value}}}], "run": "below"},
        "above": {"all": [{"m": {"$gt": {"x": value}}}], "run": "above"}})
    for seen, expected in ((value, ["below"]), (value * 2 if value > 0 else value / 2, ["above"])):
        text = matcher.encode({"id": matcher.unique_name("f"), "sid": "0", "x": seen})
        assert json.loads(text)["x"] == seen
        assert matcher.assert_fact(low, text) == expected, text
        matcher.retract_fact(low, text)


def test_a_mark_standing_in_for_an_odd_float_never_touches_a_string_value() -> None:
    fact = {"id": "a", "s": matcher._MARK + "0", "sid": "0", "x": 1e-7, "t": '"' + matcher._MARK + '0"'}
    assert json.loads(matcher.encode(fact)) == fact
