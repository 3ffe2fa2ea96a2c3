"""The lifecycle decisions on their own: fold/reopen/new, flapping, repeat notifications, quiet periods."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from gpuslo.engine import incidents

NOW = datetime(2025, 1, 1, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Incident:
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
    resolved = Incident(status="resolved", resolved_at=ago(300))
    assert incidents.decide_match(Incident(), resolved, NOW, 600) == "fold"
    assert incidents.decide_match(None, resolved, NOW, 600) == "reopen"
    assert incidents.decide_match(None, resolved, NOW, 299) == "new"  # the rule's current window decides
    assert incidents.decide_match(None, None, NOW, 600) == "new"
    assert incidents.decide_match(None, replace(resolved, resolved_at=None), NOW, 600) == "new"


def test_flapping_needs_threshold_reopens_inside_the_window():
    assert not incidents.is_flapping([ago(500), NOW], NOW, 600)
    assert incidents.is_flapping([ago(500), ago(100), NOW], NOW, 600)
    assert not incidents.is_flapping([ago(700), ago(100), NOW], NOW, 600)  # one fell out of the window


def test_should_notify_honours_repeat_interval_and_status():
    assert incidents.should_notify(Incident(last_notified_at=None), NOW)
    assert not incidents.should_notify(Incident(last_notified_at=ago(3600)), NOW)
    assert incidents.should_notify(Incident(last_notified_at=ago(4 * 3600)), NOW)
    assert incidents.should_notify(Incident(last_notified_at=ago(61), repeat_interval_s=60), NOW)
    assert not incidents.should_notify(Incident(status="acknowledged", last_notified_at=ago(10**6)), NOW)
    assert not incidents.should_notify(Incident(status="resolved", last_notified_at=None), NOW)


def test_notification_for_each_decision():
    assert incidents.notification_for("new", Incident(), NOW) == "trigger"
    assert incidents.notification_for("reopen", Incident(status="resolved"), NOW) == "trigger"
    assert incidents.notification_for("reopen", Incident(status="resolved", flapping=True), NOW) is None
    assert incidents.notification_for("fold", Incident(last_notified_at=ago(60)), NOW) is None
    assert incidents.notification_for("fold", Incident(last_notified_at=ago(5 * 3600)), NOW) == "repeat"


def test_quiet_period_and_due_for_auto_resolve():
    assert incidents.quiet_period_s(Incident()) is None
    assert incidents.quiet_period_s(Incident(resolve_after_s=300)) == 300
    assert incidents.quiet_period_s(Incident(resolve_after_s=300), rule_after_s=60) == 60
    assert incidents.quiet_period_s(Incident(resolve_after_s=60, flapping=True)) == 600  # at least the window
    assert incidents.quiet_period_s(Incident(flapping=True, flap_window_s=120)) == 120
    quiet = Incident(resolve_after_s=600, quiet_since=ago(600))
    assert incidents.due_for_auto_resolve(quiet, NOW)
    assert not incidents.due_for_auto_resolve(replace(quiet, quiet_since=ago(599)), NOW)
    assert not incidents.due_for_auto_resolve(replace(quiet, status="resolved"), NOW)
    assert incidents.due_for_auto_resolve(replace(quiet, status="acknowledged"), NOW)
    assert not incidents.due_for_auto_resolve(Incident(quiet_since=ago(10**6)), NOW)  # no resolve.after


@pytest.mark.parametrize(("action", "status", "after"), [
    ("acknowledge", "open", "acknowledged"), ("acknowledge", "acknowledged", None), ("acknowledge", "resolved", None),
    ("resolve", "open", "resolved"), ("resolve", "acknowledged", "resolved"), ("resolve", "resolved", None),
    ("reopen", "resolved", "open"), ("reopen", "open", None), ("reopen", "acknowledged", None),
])
def test_transitions(action, status, after):
    assert incidents.transition(action, status) == after


def test_refusals_say_what_to_do():
    assert incidents.refusal("resolve", 7, "resolved") == "violation 7 is already resolved"
    assert incidents.refusal("acknowledge", 7, "resolved") == "violation 7 is resolved; reopen it before acknowledging"
    assert "only a resolved violation can be reopened" in incidents.refusal("reopen", 7, "open")
