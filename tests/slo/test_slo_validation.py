"""An SLO's `indicator:` is checked like a rule: every problem with its file, line and column, and why."""

from __future__ import annotations

import pytest
from slo_support import RULEBOOK

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.rulebook import load_rulebook_text


def _problems(window="28d", target="0.99", extra="", good="itl_max_ms < 200ms", requests="{event: token_latency}"):
    text = RULEBOOK.format(window=window, target=target, extra=extra)
    text = text.replace("good: itl_max_ms < 200ms", f"good: {good}")
    text = text.replace('requests: {event: token_latency, if: "tokens > 0"}', f"requests: {requests}")
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(text, "slo-test.yaml")
    return [str(p) for p in caught.value.problems]


def test_objective_must_be_a_ratio_inside_0_and_1():
    assert _problems(target="1.5") == [
        "slo-test.yaml:12:15: SLO 'itl': target must be a ratio in (0, 1), got 1.5 (e.g. 0.99 for 99 %)"]
    assert any("got 1" in p for p in _problems(target="1"))


def test_window_of_a_measured_slo_is_at_least_an_hour():
    assert _problems(window="30m") == [
        "slo-test.yaml:8:13: SLO 'itl': a measured SLO's window must be at least 1h, got 30m"]


def test_a_good_condition_that_is_always_true_is_refused():
    (problem,) = _problems(good="'has tokens'", requests='{event: token_latency, if: "has tokens"}')
    assert problem.startswith("slo-test.yaml:11:14: the good condition holds for every request")


def test_a_good_condition_that_can_be_false_is_accepted_even_with_negations():
    text = RULEBOOK.format(window="28d", target=0.99, extra="").replace(
        "good: itl_max_ms < 200ms", "good: \"not (itl_max_ms >= 200ms) and endpoint != '/batch'\"")
    rulebook = load_rulebook_text(text, "slo-test.yaml")
    assert rulebook.slos["itl"].indicator.good_text == "not (itl_max_ms >= 200ms) and endpoint != '/batch'"


def test_unknown_fields_kinds_and_bad_conditions_are_located():
    problems = _problems(good="itl_maxx_ms < 200ms", requests="{event: token_latencyy}")
    assert problems == ["slo-test.yaml:10:25: unknown event kind 'token_latencyy' (did you mean 'token_latency'?)"]
    (problem,) = _problems(good="itl_maxx_ms < 200ms")
    assert problem.startswith("slo-test.yaml:11:13:") and "itl_maxx_ms" in problem
    problem = _group_by_problem()
    assert "endpointt" in problem and problem.startswith("slo-test.yaml:13:")


def _group_by_problem():
    text = RULEBOOK.format(window="28d", target=0.99, extra="").replace("group_by: [endpoint]", "group_by: [endpointt]")
    with pytest.raises(RulebookError) as caught:
        load_rulebook_text(text, "slo-test.yaml")
    (problem,) = caught.value.problems
    return str(problem)


def test_burn_alert_policy_is_checked():
    policy = ("      burn_alerts:\n"
              "        - {name: page, severity: critical, burn: 14.4, long: 5m, short: 1h}\n"
              "        - {name: fast, burn: 500, long: 1h, short: 5m}\n"
              "        - {name: typo, burn: 2, long: 1h, shrt: 5m}\n")
    problems = _problems(extra=policy)
    assert any("burn alert 0: the short window must be shorter than the long one" in p for p in problems)
    assert any("burn alert 1: a burn rate of 500 can never be reached with target 0.99" in p for p in problems)
    assert any("unknown field 'shrt'" in p for p in problems)
    assert all(p.startswith("slo-test.yaml:1") for p in problems)


def test_custom_policy_and_calendar_month_are_built():
    extra = ("      calendar: month\n      burn_alerts:\n"
             "        - {name: fast, severity: error, burn: 10, long: 2h, short: 10m}\n"
             "        - {name: fast, burn: 3, long: 1d, short: 2h}\n")
    sli = load_rulebook_text(RULEBOOK.format(window="28d", target=0.995, extra=extra), "x.yaml").slos["itl"].indicator
    assert sli.calendar == "month" and sli.target == 0.995
    (alert,) = sli.policy
    assert (alert.name, alert.severity, [(p.burn, p.long_s, p.short_s) for p in alert.pairs]) == (
        "fast", "error", [(10.0, 7200, 600), (3.0, 86400, 7200)])
