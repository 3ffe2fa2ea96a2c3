"""The hourly retention job: raw events by age (evidence kept), ended login sessions, and the audit log by its
own audited path when `audit_retention_days` asks for it. Each part runs in its own transactions and logs its
own failure, so one failing never stops the others."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from gpuslo.engine.config import Settings
from gpuslo.engine.errors import GpusloError
from gpuslo.engine.store import retention, web_sessions
from gpuslo.engine.store.db import Database

log = logging.getLogger(__name__)
RETENTION_INTERVAL_S = 3600.0  # how often the retention jobs run


def run_retention(database: Database, settings: Settings, now: datetime, interval_s: float) -> int:
    """Every part of retention; the number of events pruned."""
    pruned = prune_events(database, settings.event_retention_days, now, interval_s)
    try:
        with database.session() as session:
            web_sessions.prune(session, before=now - timedelta(days=1))
    except GpusloError:
        log.exception("pruning ended login sessions failed; it runs again in %.0f s", interval_s)
    prune_audit(database, settings.audit_retention_days, now, interval_s)
    return pruned


def prune_events(database: Database, days: int, now: datetime, interval_s: float) -> int:
    if days <= 0:
        return 0
    cutoff = now - timedelta(days=days)
    pruned = 0
    try:
        while True:
            with database.session() as session:
                deleted = retention.prune_events_batch(session, cutoff)
            pruned += deleted
            if deleted < retention.BATCH:
                break
    except GpusloError:
        log.exception("retention job failed after pruning %d events; it runs again in %.0f s", pruned, interval_s)
    if pruned:
        log.info("retention: pruned %d events received before %s", pruned, cutoff.isoformat())
    return pruned


def prune_audit(database: Database, days: int, now: datetime, interval_s: float) -> None:
    if days <= 0:
        return
    try:
        with database.session() as session:
            gone = retention.prune_audit(session, now - timedelta(days=days), now)
        if gone:
            log.info("retention: pruned %d audit rows older than %d days (recorded as audit.prune)", gone, days)
    except GpusloError:
        log.exception("audit retention failed; it runs again in %.0f s", interval_s)
