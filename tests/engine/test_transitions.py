"""The violation transitions on their own: fold/reopen/new, flapping, repeat notifications, quiet periods."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

import pytest

from gpuslo.engine import transitions
from gpuslo.engine.events import format_time, parse_event
from gpuslo.engine.violations import Clear, Explanation, Match

NOW = datetime(2025, 1, 1, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Violation:
    status: str = "open"
    flapping: bool = False
    resolved_at: datetime | None = None
    last_notified_at: datetime | None = None
    quiet_since: datetime = NOW
    repeat_interval_s: float = 4 * 3600.0
    flap_window_s: float = 600.0
    resolve_after_s: float | None = None


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_decide_match_folds_reopens_or_opens():
    resolved = Violation(status="resolved", resolved_at=ago(300))
    assert transitions.decide_match(Violation(), resolved, NOW, 600) == "fold"
    assert transitions.decide_match(None, resolved, NOW, 600) == "reopen"
    assert transitions.decide_match(None, resolved, NOW, 299) == "new"  # the rule's current window decides
    assert transitions.decide_match(None, None, NOW, 600) == "new"
    assert transitions.decide_match(None, replace(resolved, resolved_at=None), NOW, 600) == "new"


def test_flapping_needs_threshold_reopens_inside_the_window():
    assert not transitions.is_flapping([ago(500), NOW], NOW, 600)
    assert transitions.is_flapping([ago(500), ago(100), NOW], NOW, 600)
    assert not transitions.is_flapping([ago(700), ago(100), NOW], NOW, 600)  # one fell out of the window


def test_should_notify_honours_repeat_interval_and_status():
    assert transitions.should_notify(Violation(last_notified_at=None), NOW)
    assert not transitions.should_notify(Violation(last_notified_at=ago(3600)), NOW)
    assert transitions.should_notify(Violation(last_notified_at=ago(4 * 3600)), NOW)
    assert transitions.should_notify(Violation(last_notified_at=ago(61), repeat_interval_s=60), NOW)
    assert not transitions.should_notify(Violation(status="acknowledged", last_notified_at=ago(10**6)), NOW)
    assert not transitions.should_notify(Violation(status="resolved", last_notified_at=None), NOW)


def test_notification_for_each_decision():
    assert transitions.notification_for("new", Violation(), NOW) == "trigger"
    assert transitions.notification_for("reopen", Violation(status="resolved"), NOW) == "trigger"
    assert transitions.notification_for("reopen", Violation(status="resolved", flapping=True), NOW) is None
    assert transitions.notification_for("fold", Violation(last_notified_at=ago(60)), NOW) is None
    assert transitions.notification_for("fold", Violation(last_notified_at=ago(5 * 3600)), NOW) == "repeat"


def test_quiet_period_and_due_for_auto_resolve():
    assert transitions.quiet_period_s(Violation()) is None
    assert transitions.quiet_period_s(Violation(resolve_after_s=300)) == 300
    assert transitions.quiet_period_s(Violation(resolve_after_s=300), rule_after_s=60) == 60
    assert transitions.quiet_period_s(Violation(resolve_after_s=60, flapping=True)) == 600  # at least the window
    assert transitions.quiet_period_s(Violation(flapping=True, flap_window_s=120)) == 120
    quiet = Violation(resolve_after_s=600, quiet_since=ago(600))
    assert transitions.due_for_auto_resolve(quiet, NOW)
    assert not transitions.due_for_auto_resolve(replace(quiet, quiet_since=ago(599)), NOW)
    assert not transitions.due_for_auto_resolve(replace(quiet, status="resolved"), NOW)
    assert transitions.due_for_auto_resolve(replace(quiet, status="acknowledged"), NOW)
    assert not transitions.due_for_auto_resolve(Violation(quiet_since=ago(10**6)), NOW)  # no resolve.after


@pytest.mark.parametrize(("action", "status", "after"), [
    ("acknowledge", "open", "acknowledged"), ("acknowledge", "acknowledged", None), ("acknowledge", "resolved", None),
    ("resolve", "open", "resolved"), ("resolve", "acknowledged", "resolved"), ("resolve", "resolved", None),
    ("reopen", "resolved", "open"), ("reopen", "open", None), ("reopen", "acknowledged", None),
])
def test_transitions(action, status, after):
    assert transitions.transition(action, status) == after


def test_refusals_say_what_to_do():
    assert transitions.refusal("resolve", 7, "resolved") == "violation 7 is already resolved"
    refused = transitions.refusal("acknowledge", 7, "resolved")
    assert refused == "violation 7 is resolved; reopen it before acknowledging"
    assert "only a resolved violation can be reopened" in transitions.refusal("reopen", 7, "open")


# ---- the fold: plain frozen values in, the next state out (what store.violations and backtest apply) ----------


def _match(at: datetime, *, rulebook: str = "memory", flap_window_s: float = 600.0, summary: str = "s") -> Match:
    event = parse_event({"id": f"e-{at.timestamp()}", "kind": "cuda_oom", "time": format_time(at), "host": "n",
                         "gpu": 0, "attrs": {"requested_bytes": 1, "free_bytes": 0}})
    return Match("oom", "OOM", rulebook, "1", "h", "availability", "99.9%", "critical", "host=n",
                 MappingProxyType({"host": "n"}), summary, "fix it", None,
                 Explanation((), (event,), ()), at, flap_window_s=flap_window_s)


def _clear(at: datetime, rulebook: str = "memory") -> Clear:
    event = parse_event({"id": f"c-{at.timestamp()}", "kind": "cuda_oom", "time": format_time(at), "host": "n",
                         "gpu": 0, "attrs": {"requested_bytes": 1, "free_bytes": 0}})
    return Clear("oom", rulebook, "host=n", event)


def test_a_first_match_opens_and_later_ones_fold_widening_the_span():
    first = transitions.apply_match(None, _match(ago(60), summary="first"), ago(60))
    assert (first.action, first.before, first.notify, first.after.status) == ("created", None, "trigger", "open")
    assert first.opens_new and first.after.occurrences == 1
    early = transitions.apply_match(first.after, _match(ago(120), summary="late-arriving"), NOW)
    assert (early.action, early.notify, early.after.occurrences) == ("folded", None, 2)
    assert (early.after.first_seen, early.after.last_seen) == (ago(120), ago(60))
    assert early.after.latest is not None and early.after.latest.summary == "late-arriving"  # the latest folded
    assert (early.after.quiet_since, early.after.updated_at) == (NOW, NOW)
    assert first.after.occurrences == 1  # frozen: the fold returned a new state


def test_a_match_within_the_flap_window_reopens_and_the_third_reopen_marks_flapping():
    state = transitions.apply_match(None, _match(ago(900)), ago(900)).after
    reopens = []
    for n in range(3):
        resolved = transitions.apply_clear(state, _clear(ago(800 - 200 * n)), ago(800 - 200 * n))
        assert resolved is not None and resolved.after.status == "resolved"
        step = transitions.apply_match(resolved.after, _match(ago(700 - 200 * n)), ago(700 - 200 * n))
        reopens.append((step.action, step.notify, step.after.flaps, step.after.flapping))
        state = step.after
    assert reopens == [("reopened", "trigger", 1, False), ("reopened", "trigger", 2, False),
                       ("reopened", "trigger", 3, True)]
    resolved = transitions.apply_clear(state, _clear(ago(200)), ago(200))
    assert resolved is not None and resolved.after.flapping is False  # a resolve ends the flapping
    damped = transitions.apply_match(replace(resolved.after, flapping=True), _match(ago(100)), ago(100))
    assert (damped.action, damped.notify) == ("reopened", None)  # a flapping violation pages once
    outside = transitions.apply_match(resolved.after, _match(NOW, flap_window_s=100), NOW)
    assert (outside.action, outside.opens_new, outside.after.occurrences) == ("created", True, 1)


def test_a_clear_resolves_only_its_rulebooks_open_violation_and_not_one_matched_after_it():
    state = transitions.apply_match(None, _match(ago(60)), ago(60)).after
    assert transitions.apply_clear(None, _clear(NOW), NOW) is None
    assert transitions.apply_clear(state, _clear(ago(61)), NOW) is None  # older than the last match
    assert transitions.apply_clear(state, _clear(NOW, rulebook="other"), NOW) is None
    step = transitions.apply_clear(state, _clear(ago(30)), NOW)
    assert step is not None and (step.action, step.notify, step.before) == ("resolved", "resolve", state)
    assert (step.after.resolved_at, step.after.resolved_by) == (NOW, "engine")
    assert step.detail["reason"] == "cleared" and transitions.apply_clear(step.after, _clear(NOW), NOW) is None


def test_quiet_and_human_transitions():
    state = replace(transitions.apply_match(None, _match(ago(700)), ago(700)).after, resolve_after_s=600.0)
    assert transitions.apply_quiet(state, ago(200)) is None
    quiet = transitions.apply_quiet(state, NOW)
    assert quiet is not None and quiet.after.status == "resolved" and quiet.detail["quiet_s"] == 600.0
    acked = transitions.apply_action(state, "acknowledge", "alice", NOW)
    assert acked is not None and (acked.after.status, acked.after.acknowledged_by, acked.notify) == (
        "acknowledged", "alice", "acknowledge")
    assert transitions.apply_action(acked.after, "acknowledge", "bob", NOW) is None
    resolved = transitions.apply_action(acked.after, "resolve", "bob", NOW)
    assert resolved is not None and resolved.after.resolved_by == "bob"
    reopened = transitions.apply_action(resolved.after, "reopen", "carol", NOW + timedelta(seconds=5))
    assert reopened is not None and reopened.notify == "trigger"
    assert (reopened.after.acknowledged_by, reopened.after.resolved_at) == (None, None)
    assert reopened.after.quiet_since == NOW + timedelta(seconds=5)
