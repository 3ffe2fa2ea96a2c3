"""Turn a violation change into outbox rows, inside the transaction that recorded the change.

Routing picks receivers; a silence or an inhibition turns a row into `suppressed` (kept, with the reason);
`repeat_interval` spaces out repeats per receiver; `group_wait` delays the first trigger.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal, get_args

from sqlalchemy.orm import Session

from gpuslo.engine.alerts.notification import Notification, dedup_key_for, violation_url
from gpuslo.engine.alerts.routing import AlertsConfig, Target, inhibited_by, route
from gpuslo.engine.events import format_time
from gpuslo.engine.store import outbox, silences
from gpuslo.engine.store.outbox_models import NotificationRow
from gpuslo.engine.store.read_models import ViolationView

# Given the session, the violation and now: why it is silenced, or None. Default: the stored silences.
SilenceCheck = Callable[[Session, ViolationView, datetime], str | None]
# What a recorded change tells receivers (the view's `notify`, transitions.NotifyKind's vocabulary): a match is
# a first trigger or a repeat of it; a transition is an acknowledgement or a resolve.
MatchNotice = Literal["trigger", "repeat"]
TransitionNotice = Literal["acknowledge", "resolve"]


def silence_reason(session: Session, violation: ViolationView, now: datetime) -> str | None:
    """Why the stored silences mute this violation now, or None."""
    found = silences.active_silences_for(session, violation, now)
    if not found:
        return None
    return f"silenced by silence {found[0].id} ({found[0].author}: {found[0].comment})"


def notification_of(violation: ViolationView, action: str, public_url: str) -> Notification:
    """The Notification of a stored violation."""
    return Notification(
        dedup_key=dedup_key_for(violation.id), action=action, severity=violation.severity,
        summary=violation.summary, url=violation_url(public_url, violation.id), rule=violation.rule_id,
        rule_title=violation.rule_title, slo=violation.slo, violation_id=violation.id, host=violation.host,
        gpu=violation.gpu, labels=dict(violation.labels), group=dict(violation.group),
        first_seen=format_time(violation.first_seen), last_seen=format_time(violation.last_seen),
        occurrences=violation.occurrences, runbook=violation.runbook)


def _subject(notification: Notification) -> dict[str, Any]:
    return {**notification.match_fields(), "violation_id": notification.violation_id,
            "group": dict(notification.group)}


def enqueue_for_match(session: Session, violation: ViolationView, *, config: AlertsConfig, public_url: str,
                      now: datetime, notice: MatchNotice | None = None,
                      silenced: SilenceCheck | None = None) -> list[int]:
    """Outbox rows for a recorded match; `notice` (default: the view's `notify`, the lifecycle's decision) is
    trigger, repeat, or None for nothing to send. Returns the new row ids."""
    return outbox.ids_of(session, _match_rows(session, violation, config, public_url, now, notice, silenced))


def _match_rows(session: Session, violation: ViolationView, config: AlertsConfig, public_url: str, now: datetime,
                notice: MatchNotice | None, silenced: SilenceCheck | None) -> list[NotificationRow]:
    notice = _match_notice(notice if notice is not None else violation.notify)
    if notice is None:
        return []
    notification = notification_of(violation, "trigger", public_url)
    subject = _subject(notification)
    targets = route(config, subject)
    if not targets:
        return []
    reason = (silenced or silence_reason)(session, violation, now)
    if reason is None and config.inhibit:
        reason = inhibited_by(config.inhibit, subject, outbox.active_violation_fields(session, violation.host))
    rows = []
    for target in targets:
        if notice == "repeat" and _recently_sent(session, target, notification, now, suppressed=reason is not None):
            continue
        wait = target.route.group_wait if notice == "trigger" else 0.0
        rows.append(outbox.add(
            session, violation_id=violation.id, receiver=target.receiver, action="trigger",
            dedup_key=notification.dedup_key, payload=notification.to_dict(), now=now,
            not_before=now + timedelta(seconds=wait), suppressed_reason=reason))
    return rows


def _match_notice(notify: str | None) -> MatchNotice | None:
    if notify is None:
        return None
    if notify == "trigger":
        return "trigger"
    if notify == "repeat":
        return "repeat"
    raise ValueError(f"enqueue_for_match: notice {notify!r} is not trigger or repeat")


def _recently_sent(session: Session, target: Target, notification: Notification, now: datetime, *,
                   suppressed: bool) -> bool:
    # While suppressed, one suppressed row per interval is enough to show what was muted.
    last = outbox.last_trigger_at(session, target.receiver, notification.dedup_key, include_suppressed=suppressed)
    return last is not None and (now - last).total_seconds() < target.route.repeat_interval


def enqueue_for_transition(session: Session, violation: ViolationView, action: str, *, config: AlertsConfig,
                           public_url: str, now: datetime) -> list[int]:
    """Acknowledge or resolve rows for every receiver that was sent this violation's trigger.

    A resolve skips receivers whose route says `send_resolved: false`; neither is ever silenced: a receiver
    that has an incident open must hear that it closed.
    """
    return outbox.ids_of(session, _transition_rows(session, violation, action, config, public_url, now))


def _transition_rows(session: Session, violation: ViolationView, action: str, config: AlertsConfig,
                     public_url: str, now: datetime) -> list[NotificationRow]:
    if action not in get_args(TransitionNotice):
        raise ValueError(f"enqueue_for_transition: action {action!r} is not acknowledge or resolve")
    notification = notification_of(violation, action, public_url)
    routes = {t.receiver: t.route for t in route(config, _subject(notification))}
    rows = []
    for name in outbox.triggered_receivers(session, notification.dedup_key):
        receiver = config.receivers.get(name)
        if receiver is None or action not in receiver.actions:
            continue
        if action == "resolve" and name in routes and not routes[name].send_resolved:
            continue
        rows.append(outbox.add(session, violation_id=violation.id, receiver=name, action=action,
                               dedup_key=notification.dedup_key, payload=notification.to_dict(), now=now))
    return rows


def enqueue_for_change(session: Session, violation: ViolationView, *, config: AlertsConfig, public_url: str,
                       now: datetime, silenced: SilenceCheck | None = None) -> list[int]:
    """Outbox rows for whatever the view's `notify` says (trigger, repeat, acknowledge, resolve or None)."""
    return outbox.ids_of(session, _change_rows(session, violation, config, public_url, now, silenced))


def add_for_change(session: Session, violation: ViolationView, *, config: AlertsConfig, public_url: str,
                   now: datetime, silenced: SilenceCheck | None = None) -> int:
    """enqueue_for_change without writing the rows yet (outbox.add): the session's next flush writes them with
    those the batch's other changes added meanwhile, in one INSERT; how many rows it added."""
    return len(_change_rows(session, violation, config, public_url, now, silenced))


def _change_rows(session: Session, violation: ViolationView, config: AlertsConfig, public_url: str, now: datetime,
                 silenced: SilenceCheck | None) -> list[NotificationRow]:
    if violation.notify in ("acknowledge", "resolve"):
        return _transition_rows(session, violation, violation.notify, config, public_url, now)
    return _match_rows(session, violation, config, public_url, now, None, silenced)
