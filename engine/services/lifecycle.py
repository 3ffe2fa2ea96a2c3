"""The incident lifecycle: acknowledge, resolve, reopen and comment on violations, silences, and the periodic job
that auto-resolves quiet violations and expires ended silences. Each human action is audited and notifies."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from gpuslo.engine.errors import GpusloError
from gpuslo.engine.services.changes import Changes, utcnow
from gpuslo.engine.store import lifecycle, silences
from gpuslo.engine.store.audit import AuditNote
from gpuslo.engine.store.read_models import SilenceView, ViolationView

log = logging.getLogger(__name__)
# How often auto-resolve and silence expiry run; a quiet period is honoured to within this much.
LIFECYCLE_INTERVAL_S = 15.0


class Lifecycle:
    """Violations' status changes and silences on one database."""

    def __init__(self, changes: Changes, quiet_by_rule: Callable[[], dict[str, float]]):
        self._changes, self._database, self._quiet_by_rule = changes, changes.database, quiet_by_rule

    def acknowledge(self, violation_id: int, *, actor: str, comment: str | None = None,
                    source: str | None = None) -> ViolationView:
        return self._changes.apply(lambda s: lifecycle.acknowledge(
            s, violation_id, actor=actor, comment=comment, now=utcnow(), source=source),
            AuditNote("acknowledge", "violation", violation_id, actor, source, comment))

    def resolve(self, violation_id: int, *, actor: str, comment: str | None = None,
                source: str | None = None) -> ViolationView:
        return self._changes.apply(lambda s: lifecycle.resolve(
            s, violation_id, actor=actor, comment=comment, now=utcnow(), source=source),
            AuditNote("resolve", "violation", violation_id, actor, source, comment))

    def reopen(self, violation_id: int, *, actor: str, comment: str | None = None,
               source: str | None = None) -> ViolationView:
        return self._changes.apply(lambda s: lifecycle.reopen(
            s, violation_id, actor=actor, comment=comment, now=utcnow(), source=source),
            AuditNote("reopen", "violation", violation_id, actor, source, comment))

    def comment(self, violation_id: int, *, actor: str, comment: str, source: str | None = None) -> ViolationView:
        return self._changes.apply(lambda s: lifecycle.comment(
            s, violation_id, actor=actor, comment=comment, now=utcnow(), source=source),
            AuditNote("comment", "violation", violation_id, actor, source, comment))

    def silences(self, *, include_expired: bool = True) -> list[SilenceView]:
        with self._database.session(readonly=True) as session:
            return silences.list_silences(session, include_expired=include_expired)

    def create_silence(self, *, matchers: Mapping[str, object], starts_at: datetime, ends_at: datetime,
                       author: str, comment: str, source: str | None = None) -> SilenceView:
        return self._changes.apply(lambda s: silences.create_silence(
            s, matchers=matchers, starts_at=starts_at, ends_at=ends_at, author=author, comment=comment,
            now=utcnow()), AuditNote("silence.create", "silence", None, author, source, comment))

    def expire_silence(self, silence_id: int, *, actor: str, source: str | None = None) -> SilenceView:
        return self._changes.apply(lambda s: silences.expire_silence(s, silence_id, actor=actor, now=utcnow()),
                                   AuditNote("silence.expire", "silence", silence_id, actor, source))

    def run_lifecycle(self, now: datetime | None = None) -> list[ViolationView]:
        """The periodic job: auto-resolve quiet violations and expire ended silences; returns those resolved."""
        at = now or utcnow()
        try:
            with self._database.session() as session:
                resolved = lifecycle.auto_resolve_due(session, at, self._quiet_by_rule())
                for view in resolved:
                    self._changes.notify(session, view, at)
                silences.expire_ended_silences(session, at)
        except GpusloError:
            log.exception("lifecycle job failed; it runs again in %.0f s", LIFECYCLE_INTERVAL_S)
            return []
        for view in resolved:
            log.info("violation %s (%s %s) auto-resolved after a quiet period", view.id, view.rule_id,
                     view.group_key)
        return resolved
