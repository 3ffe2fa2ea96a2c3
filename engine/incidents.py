"""Incident lifecycle decisions as pure functions: fold, reopen or open; notify or not; resolve when quiet.

A violation is an incident: open → acknowledged → resolved, and reopened. These functions decide; the store
(gpuslo.engine.store.lifecycle and repository.record_match) applies their answers. They read any object with
the attributes of `IncidentLike` (a stored ViolationView has them all), so they are tested without a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol

# Reopens within one flap window that mark a violation as flapping.
FLAP_THRESHOLD = 3

Decision = Literal["fold", "reopen", "new"]
# What a change means for receivers; None: nothing to send.
Notification = Literal["trigger", "repeat", "acknowledge", "resolve"]

# Human actions: status before → status after. Anything else is an InvalidTransition.
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "acknowledge": (("open",), "acknowledged"),
    "resolve": (("open", "acknowledged"), "resolved"),
    "reopen": (("resolved",), "open"),
}


class IncidentLike(Protocol):
    """The lifecycle attributes of a violation."""

    @property
    def status(self) -> str: ...
    @property
    def flapping(self) -> bool: ...
    @property
    def resolved_at(self) -> datetime | None: ...
    @property
    def last_notified_at(self) -> datetime | None: ...
    @property
    def quiet_since(self) -> datetime: ...
    @property
    def repeat_interval_s(self) -> float: ...
    @property
    def flap_window_s(self) -> float: ...
    @property
    def resolve_after_s(self) -> float | None: ...


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def decide_match(active: IncidentLike | None, latest_resolved: IncidentLike | None, now: datetime,
                 flap_window_s: float) -> Decision:
    """A new match folds into the unresolved violation, reopens one resolved within the flap window, or opens one.

    `flap_window_s` is the matching rule's current window (the rule may have changed since the resolve).
    """
    if active is not None:
        return "fold"
    if latest_resolved is not None and latest_resolved.resolved_at is not None:
        if 0 <= _seconds(now, latest_resolved.resolved_at) <= flap_window_s:
            return "reopen"
    return "new"


def is_flapping(reopens: Sequence[datetime], now: datetime, flap_window_s: float,
                threshold: int = FLAP_THRESHOLD) -> bool:
    """True when at least `threshold` reopens (this one included) fall within the flap window ending now."""
    return sum(1 for at in reopens if 0 <= _seconds(now, at) <= flap_window_s) >= threshold


def should_notify(violation: IncidentLike, now: datetime) -> bool:
    """Whether a folded repeat counts as new for notification: `repeat_interval` passed since the last one.

    An acknowledged violation is being handled and a resolved one is over: neither repeats. A violation never
    notified (`last_notified_at` None) always notifies.
    """
    if violation.status != "open":
        return False
    if violation.last_notified_at is None:
        return True
    return _seconds(now, violation.last_notified_at) >= violation.repeat_interval_s


def notification_for(decision: Decision, violation: IncidentLike, now: datetime) -> Notification | None:
    """What a match means for receivers, given the violation as it was before the match.

    New: trigger. Reopen: trigger again, unless the violation was already flapping (the damping: a flapping
    incident pages once, then stays quiet until it has been resolved for good). Fold: a repeat when
    `should_notify` says so.
    """
    if decision == "new":
        return "trigger"
    if decision == "reopen":
        return None if violation.flapping else "trigger"
    return "repeat" if should_notify(violation, now) else None


def quiet_period_s(violation: IncidentLike, rule_after_s: float | None = None) -> float | None:
    """How long without a new match resolves the violation; None: only a human resolves it.

    `rule_after_s` (the loaded rule's `resolve.after`) wins over the value stored with the violation. A
    flapping violation waits at least its flap window, so it stays open until it is really quiet.
    """
    after = rule_after_s if rule_after_s is not None else violation.resolve_after_s
    if violation.flapping:
        return max(after or 0.0, violation.flap_window_s)
    return after


def due_for_auto_resolve(violation: IncidentLike, now: datetime, rule_after_s: float | None = None) -> bool:
    """True when the violation is unresolved and no match arrived for its quiet period."""
    if violation.status == "resolved":
        return False
    quiet = quiet_period_s(violation, rule_after_s)
    return quiet is not None and _seconds(now, violation.quiet_since) >= quiet


def transition(action: str, status: str) -> str | None:
    """The status a human action leads to from `status`, or None when the action is not allowed there."""
    allowed, after = TRANSITIONS[action]
    return after if status in allowed else None


def refusal(action: str, violation_id: int, status: str) -> str:
    """Why `action` cannot be done on a violation in `status`, and what to do instead."""
    if action == "resolve" and status == "resolved":
        return f"violation {violation_id} is already resolved"
    if action == "acknowledge" and status == "acknowledged":
        return f"violation {violation_id} is already acknowledged"
    if action == "acknowledge":
        return f"violation {violation_id} is resolved; reopen it before acknowledging"
    return f"violation {violation_id} is {status}, not resolved; only a resolved violation can be reopened"
