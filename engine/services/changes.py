"""One change per transaction: the change, its audit row and the outbox rows for what it means to receivers."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy.orm import Session

from gpuslo.engine.alerts import AlertsConfig, add_for_change
from gpuslo.engine.store import audit
from gpuslo.engine.store.audit import AuditNote
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import ViolationView

T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Notifier:
    """Adds the outbox rows of a changed violation (view.notify) to the change's transaction; nothing when
    alerting is off. The rows are written at the session's next flush (at the latest its commit), so the rows
    of a batch's changes go in a few multi-row INSERTs, not one each; a savepoint's end writes those added in it."""

    def __init__(self, alerts: AlertsConfig | None, public_url: str):
        self.alerts, self._public_url = alerts, public_url

    def __call__(self, session: Session, view: ViolationView, at: datetime) -> None:
        if self.alerts is not None:
            add_for_change(session, view, config=self.alerts, public_url=self._public_url, now=at)


class Changes:
    """Runs human actions on one database: each in its own transaction, audited, notifying."""

    def __init__(self, database: Database, notify: Notifier):
        self.database, self.notify = database, notify

    def apply(self, change: Callable[[Session], T], note: AuditNote | None = None) -> T:
        """Run `change` in its own transaction; the audit row (with `note`) and the outbox rows join it."""
        with self.database.session() as session:
            result = audit.audited(session, note, change, utcnow()) if note else change(session)
            if isinstance(result, ViolationView):
                self.notify(session, result, utcnow())
            return result
