"""Silences: equality matchers on a violation's fields that mute its notifications for a while.

Matcher keys: severity, slo, rule_id, host, gpu, and `labels.<name>`; every matcher must equal the violation's
value (compared as text). A silence mutes notifications only: violations still open, fold and resolve, and the
outbox records what was suppressed. The caller owns the transaction.

The unexpired silences are read once per transaction (the first time a notification asks), not once per
violation: an engine batch notifies dozens. A silence another transaction commits while one runs takes effect
from that writer's next transaction on, as if it had been created just after; one this transaction creates or
expires takes effect at once (it reads them again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpuslo.engine.errors import InvalidSilence, InvalidTransition, NotFoundError
from gpuslo.engine.store.models import SilenceRow
from gpuslo.engine.store.read_models import SilenceView, ViolationView
from gpuslo.engine.store.rows import require_aware, silence_view, store_operation

MATCHER_FIELDS = ("severity", "slo", "rule_id", "host", "gpu")
LABEL_PREFIX = "labels."
_LABEL_NAME = re.compile(r"[A-Za-z0-9_.\-/]{1,100}")
MAX_MATCHERS = 20
_UNEXPIRED = "gpuslo.unexpired_silences"  # Session.info key: ((transaction, savepoint), unexpired silences)


def check_matchers(matchers: Mapping[str, object]) -> dict[str, str]:
    """The matchers as a text map; InvalidSilence names an unknown key or an empty set (which would mute all)."""
    if not matchers:
        raise InvalidSilence("a silence needs at least one matcher; an empty one would mute every violation")
    if len(matchers) > MAX_MATCHERS:
        raise InvalidSilence(f"a silence takes at most {MAX_MATCHERS} matchers, got {len(matchers)}")
    clean: dict[str, str] = {}
    for key, value in matchers.items():
        label = key.removeprefix(LABEL_PREFIX) if key.startswith(LABEL_PREFIX) else None
        if key not in MATCHER_FIELDS and not (label and _LABEL_NAME.fullmatch(label)):
            raise InvalidSilence(f"unknown matcher {key!r}: use {', '.join(MATCHER_FIELDS)} or labels.<name>")
        if not isinstance(value, str | int) or isinstance(value, bool) or str(value).strip() == "":
            raise InvalidSilence(f"matcher {key!r} needs a non-empty text or integer value, got {value!r}")
        clean[key] = str(value).strip()
    return clean


def matches(matchers: Mapping[str, str], violation: ViolationView) -> bool:
    """True when every matcher equals the violation's field (labels via `labels.<name>`)."""
    for key, wanted in matchers.items():
        if key.startswith(LABEL_PREFIX):
            actual = violation.labels.get(key.removeprefix(LABEL_PREFIX))
        else:
            actual = getattr(violation, key)
        if actual is None or str(actual) != wanted:
            return False
    return True


@store_operation
def create_silence(session: Session, *, matchers: Mapping[str, object], starts_at: datetime, ends_at: datetime,
                   author: str, comment: str, now: datetime) -> SilenceView:
    """Store a silence; it must end after it starts and after now, and say why (comment)."""
    for moment, what in ((starts_at, "starts_at"), (ends_at, "ends_at"), (now, "now")):
        require_aware(moment, f"create_silence: {what}")
    clean = check_matchers(matchers)
    if ends_at <= starts_at or ends_at <= now:
        raise InvalidSilence("a silence must end after it starts and after now")
    if not comment.strip() or not author.strip():
        raise InvalidSilence("a silence needs an author and a comment saying why")
    row = SilenceRow(matchers=clean, starts_at=starts_at, ends_at=ends_at, author=author.strip(),
                     comment=comment.strip(), created_at=now, expired_at=None, expired_by=None)
    session.add(row)
    session.flush()
    session.info.pop(_UNEXPIRED, None)
    return silence_view(row)


@store_operation
def expire_silence(session: Session, silence_id: int, *, actor: str, now: datetime) -> SilenceView:
    """End a silence now; expiring one that already ended or was expired is an InvalidTransition."""
    require_aware(now, "expire_silence")
    row = session.scalars(select(SilenceRow).where(SilenceRow.id == silence_id).with_for_update()).first()
    if row is None:
        raise NotFoundError(f"no silence with id {silence_id}")
    if row.expired_at is not None:
        raise InvalidTransition(f"silence {silence_id} already expired (by {row.expired_by})")
    row.expired_at, row.expired_by = now, actor
    session.flush()
    session.info.pop(_UNEXPIRED, None)
    return silence_view(row)


@store_operation
def expire_ended_silences(session: Session, now: datetime) -> int:
    """Mark silences whose end has passed as expired (at their end, by `schedule`); returns how many."""
    require_aware(now, "expire_ended_silences")
    result = session.execute(
        update(SilenceRow).where(SilenceRow.expired_at.is_(None), SilenceRow.ends_at <= now)
        .values(expired_at=SilenceRow.ends_at, expired_by="schedule")
    )
    session.info.pop(_UNEXPIRED, None)
    return int(getattr(result, "rowcount", 0) or 0)


@store_operation
def get_silence(session: Session, silence_id: int) -> SilenceView | None:
    row = session.get(SilenceRow, silence_id)
    return None if row is None else silence_view(row)


@store_operation
def list_silences(session: Session, *, include_expired: bool = True, limit: int = 500) -> list[SilenceView]:
    """Silences, unexpired first, then newest first."""
    query = select(SilenceRow)
    if not include_expired:
        query = query.where(SilenceRow.expired_at.is_(None))
    query = query.order_by(SilenceRow.expired_at.is_not(None), SilenceRow.created_at.desc(), SilenceRow.id.desc())
    return [silence_view(row) for row in session.scalars(query.limit(limit))]


@store_operation
def active_silences_for(session: Session, violation: ViolationView, now: datetime) -> list[SilenceView]:
    """The silences muting `violation` at `now`: started, not ended, not expired, every matcher equal."""
    require_aware(now, "active_silences_for")
    return [view for view in _unexpired(session) if view.starts_at <= now < view.ends_at
            and matches(view.matchers, violation)]


def _unexpired(session: Session) -> tuple[SilenceView, ...]:
    """The silences not expired, by id: read once per transaction (module docstring), and again inside a
    savepoint (whose rollback may undo a silence it made)."""
    memo = session.info.get(_UNEXPIRED)
    if memo is not None and memo[0] == _scope(session):
        return memo[1]  # type: ignore[no-any-return]
    views = tuple(map(silence_view, session.scalars(
        select(SilenceRow).where(SilenceRow.expired_at.is_(None)).order_by(SilenceRow.id))))
    session.info[_UNEXPIRED] = (_scope(session), views)  # the memo holds them: their ids are never reused
    return views


def _scope(session: Session) -> tuple[object, object]:
    return session.get_transaction(), session.get_nested_transaction()
