"""Violation transitions as a pure fold over frozen values: open, fold, reopen, resolve (cleared, quiet, human).

A violation goes open → acknowledged → resolved, and is reopened. These functions decide and return the new
`ViolationState`; the store (gpuslo.engine.store.violations and .lifecycle) reads the state, writes what comes
back and does nothing else. Backtest folds matches with the same functions and no database.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from gpuslo.engine.events import format_time
from gpuslo.engine.violations import Clear, Match

# Reopens within one flap window that mark a violation as flapping.
FLAP_THRESHOLD = 3
ENGINE_ACTOR = "engine"

Decision = Literal["fold", "reopen", "new"]
# What a change means for receivers; None: nothing to send.
NotifyKind = Literal["trigger", "repeat", "acknowledge", "resolve"]

# Human actions: status before → status after. Anything else is an InvalidTransition.
TRANSITIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "acknowledge": (("open",), "acknowledged"),
    "resolve": (("open", "acknowledged"), "resolved"),
    "reopen": (("resolved",), "open"),
}
_ACTION_NOTIFY: dict[str, NotifyKind] = {"acknowledge": "acknowledge", "resolve": "resolve", "reopen": "trigger"}
_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})
_ACTION_HISTORY = {"acknowledge": "acknowledged", "resolve": "resolved", "reopen": "reopened"}


@dataclass(frozen=True)
class ViolationLifecycle:
    """What a violation's transitions read and change, shared by the fold's ViolationState and the stored
    ViolationView (gpuslo.engine.store.read_models), so that both name each lifecycle value once."""

    rule_id: str
    group_key: str
    group: Mapping[str, Any]
    rulebook: str
    status: str
    first_seen: datetime
    last_seen: datetime
    occurrences: int
    created_at: datetime
    updated_at: datetime
    quiet_since: datetime
    last_notified_at: datetime | None
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    resolved_at: datetime | None
    resolved_by: str | None
    flaps: int
    flapping: bool
    repeat_interval_s: float
    flap_window_s: float
    resolve_after_s: float | None


@dataclass(frozen=True)
class ViolationState(ViolationLifecycle):
    """A violation's lifecycle in the fold.

    `latest` is the last match this fold folded in (its text, explanation and place replace the stored ones);
    None: nothing folded yet, the stored ones stand. `reopens`: when it was reopened, for the flapping count.
    """

    latest: Match | None = None
    reopens: tuple[datetime, ...] = ()

    @classmethod
    def of(cls, columns: Mapping[str, Any], reopens: Sequence[datetime] = ()) -> ViolationState:
        """The state of a stored violation, from its column values (a row's or a view's)."""
        return cls(
            columns["rule_id"], columns["group_key"], columns["group"], columns["rulebook"], columns["status"],
            columns["first_seen"], columns["last_seen"], columns["occurrences"], columns["created_at"],
            columns["updated_at"], columns["quiet_since"] or columns["updated_at"], columns["last_notified_at"],
            columns["acknowledged_at"], columns["acknowledged_by"], columns["resolved_at"],
            columns["resolved_by"], columns["flaps"] or 0, bool(columns["flapping"]), columns["repeat_interval_s"],
            columns["flap_window_s"], columns["resolve_after_s"], None, tuple(reopens))


@dataclass(frozen=True)
class Step:
    """One transition: the history action, the state before (None: a new violation) and after, what receivers
    get, and the history detail (the store adds the evidence it linked)."""

    action: str  # created, folded, reopened, resolved, acknowledged, commented
    before: ViolationState | None
    after: ViolationState
    notify: NotifyKind | None
    detail: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def opens_new(self) -> bool:
        """True when the step opens a new violation (a new row), not a change of `before`."""
        return self.before is None


# ---- decisions ----------------------------------------------------------------------------------------


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def decide_match(active: ViolationLifecycle | None, latest_resolved: ViolationLifecycle | None, now: datetime,
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


def should_notify(violation: ViolationLifecycle, now: datetime) -> bool:
    """Whether a folded repeat counts as new for notification: `repeat_interval` passed since the last one.

    An acknowledged violation is being handled and a resolved one is over: neither repeats. A violation never
    notified (`last_notified_at` None) always notifies.
    """
    if violation.status != "open":
        return False
    if violation.last_notified_at is None:
        return True
    return _seconds(now, violation.last_notified_at) >= violation.repeat_interval_s


def notification_for(decision: Decision, violation: ViolationLifecycle, now: datetime) -> NotifyKind | None:
    """What a match means for receivers, given the violation as it was before the match.

    New: trigger. Reopen: trigger again, unless the violation was already flapping (the damping: a flapping
    violation pages once, then stays quiet until it has been resolved for good). Fold: a repeat when
    `should_notify` says so.
    """
    if decision == "new":
        return "trigger"
    if decision == "reopen":
        return None if violation.flapping else "trigger"
    return "repeat" if should_notify(violation, now) else None


def quiet_period_s(violation: ViolationLifecycle, rule_after_s: float | None = None) -> float | None:
    """How long without a new match resolves the violation; None: only a human resolves it.

    `rule_after_s` (the loaded rule's `resolve.after`) wins over the value stored with the violation. A
    flapping violation waits at least its flap window, so it stays open until it is really quiet.
    """
    after = rule_after_s if rule_after_s is not None else violation.resolve_after_s
    if violation.flapping:
        return max(after or 0.0, violation.flap_window_s)
    return after


def due_for_auto_resolve(violation: ViolationLifecycle, now: datetime, rule_after_s: float | None = None) -> bool:
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


# ---- the fold -----------------------------------------------------------------------------------------


def opened(match: Match, now: datetime) -> ViolationState:
    """The open violation a first match creates."""
    return ViolationState(
        match.rule_id, match.group_key, MappingProxyType(dict(match.group)), match.rulebook, "open",
        match.seen_at, match.seen_at, 1, now, now, now, now, None, None, None, None, 0, False,
        match.repeat_interval_s, match.flap_window_s, match.resolve_after_s, match)


def _folded(state: ViolationState, match: Match, now: datetime, **changes: Any) -> ViolationState:
    """`state` with the match folded in: its rulebook, text and options replace the old ones; the span widens.

    Built field by field, not with dataclasses.replace (five times slower: the fold is the engine's hot path).
    """
    s = state
    folded = ViolationState(
        s.rule_id, s.group_key, s.group, match.rulebook, s.status, min(s.first_seen, match.seen_at),
        max(s.last_seen, match.seen_at), s.occurrences + 1, s.created_at, now, now, s.last_notified_at,
        s.acknowledged_at, s.acknowledged_by, s.resolved_at, s.resolved_by, s.flaps, s.flapping,
        match.repeat_interval_s, match.flap_window_s, match.resolve_after_s, match, s.reopens)
    return replace(folded, **changes) if changes else folded


def apply_match(state: ViolationState | None, match: Match, now: datetime) -> Step:
    """What a match does to its rule and group's violation: `state` is the unresolved one, else the latest
    resolved one, else None. It folds into the unresolved one, reopens one resolved within the rule's flap
    window (counting flaps), or opens a new one."""
    active = state if state is not None and state.status != "resolved" else None
    decision = decide_match(active, state, now, match.flap_window_s)
    if decision == "new":
        return Step("created", None, opened(match, now), "trigger", _NO_DETAIL)
    assert state is not None
    if decision == "fold":
        notify = notification_for("fold", state, now)
        if notify is None:
            return Step("folded", state, _folded(state, match, now), None, _NO_DETAIL)
        return Step("folded", state, _folded(state, match, now, last_notified_at=now), notify, _NO_DETAIL)
    notify = notification_for("reopen", state, now)
    reopens = (*state.reopens, now)
    flaps = state.flaps + 1
    flapping = state.flapping or is_flapping(reopens, now, match.flap_window_s)
    after = _folded(state, match, now, status="open", resolved_at=None, resolved_by=None, acknowledged_at=None,
                    acknowledged_by=None, flaps=flaps, flapping=flapping, reopens=reopens,
                    last_notified_at=now if notify is not None else state.last_notified_at)
    detail = {"reason": "flap", "resolved_at": format_time(state.resolved_at or now), "flaps": flaps,
              "flapping": flapping, "notify": notify}
    return Step("reopened", state, after, notify, MappingProxyType(detail))


def _resolved(state: ViolationState, now: datetime, actor: str, reason: Mapping[str, Any]) -> Step:
    after = replace(state, status="resolved", resolved_at=now, resolved_by=actor, updated_at=now, flapping=False)
    return Step("resolved", state, after, "resolve", MappingProxyType(dict(reason)))


def apply_clear(state: ViolationState | None, clear: Clear, now: datetime) -> Step | None:
    """Resolve the unresolved violation of the clear's rule (same rulebook) and group key; None when there is
    none, or when the clearing event is older than its last match (the match came after the clear)."""
    if state is None or state.status == "resolved" or state.rulebook != clear.rulebook:
        return None
    if clear.event.time < state.last_seen:
        return None
    return _resolved(state, now, ENGINE_ACTOR, {"reason": "cleared", "event_id": clear.event.id,
                                                "event_kind": clear.event.kind,
                                                "event_time": format_time(clear.event.time)})


def apply_quiet(state: ViolationState, now: datetime, rule_after_s: float | None = None) -> Step | None:
    """Resolve a violation that had no match for its quiet period (the flapping is then over); None if not due.

    `rule_after_s` is the loaded rule's `resolve.after`, which wins over the value stored with the violation.
    """
    if not due_for_auto_resolve(state, now, rule_after_s):
        return None
    return _resolved(state, now, ENGINE_ACTOR, {"reason": "quiet", "quiet_s": quiet_period_s(state, rule_after_s),
                                                "quiet_since": format_time(state.quiet_since)})


def apply_action(state: ViolationState, action: str, actor: str, now: datetime) -> Step | None:
    """A human action (acknowledge, resolve, reopen); None when `TRANSITIONS` does not allow it from the state.

    A reopen forgets the acknowledgement and the resolve and restarts the quiet period and the repeat interval.
    """
    status = transition(action, state.status)
    if status is None:
        return None
    if action == "acknowledge":
        after = replace(state, status=status, updated_at=now, acknowledged_at=now, acknowledged_by=actor)
    elif action == "resolve":
        after = replace(state, status=status, updated_at=now, resolved_at=now, resolved_by=actor)
    else:
        after = replace(state, status=status, updated_at=now, resolved_at=None, resolved_by=None,
                        acknowledged_at=None, acknowledged_by=None, quiet_since=now, last_notified_at=now)
    return Step(_ACTION_HISTORY[action], state, after, _ACTION_NOTIFY[action])
