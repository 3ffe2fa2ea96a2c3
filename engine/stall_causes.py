"""The stall-causes job: cluster the attributed token stalls of the last day from the store (engine/stall_clusters)
and keep the latest result for the "Stall causes" page; the service runs it every CLUSTER_INTERVAL_S."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

from gpuslo.engine.events import Event
from gpuslo.engine.stall_clusters import Clustering, cluster
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.read_models import EventFilter

log = logging.getLogger(__name__)
CLUSTER_INTERVAL_S = 300.0
WINDOW = timedelta(days=1)
MAX_STALLS = 20_000
_PAGE = 1000


def stored(database: Database, kind: str, since: datetime, limit: int = MAX_STALLS) -> list[Event]:
    """Stored events of one kind since a time, newest first, at most `limit`."""
    out: list[Event] = []
    page = 1
    while len(out) < limit:
        with database.session(readonly=True) as session:
            found = repository.list_events(session, EventFilter(kind=kind, since=since), page=page,
                                           page_size=_PAGE)
        out += [item.event for item in found.items]
        if not found.has_next:
            break
        page += 1
    return out[:limit]


class StallCauses:
    """The latest clustering of stall causes, recomputed by `run` (the periodic job) or on first read."""

    def __init__(self, database: Database):
        self.database = database
        self._latest: tuple[datetime, Clustering, list[Event]] | None = None
        self._lock = threading.Lock()

    def run(self, now: datetime | None = None) -> Clustering:
        since = (now or datetime.now(UTC)) - WINDOW
        stalls = stored(self.database, "token_stall", since)
        context = stored(self.database, "mem_fragmentation", since - timedelta(minutes=1))
        result = cluster(stalls, context)
        with self._lock:
            self._latest = (now or datetime.now(UTC), result, stalls)
        log.info("stall causes: %d stalls in %d clusters", len(result.labels), len(result.clusters))
        return result

    def latest(self) -> tuple[datetime, Clustering, list[Event]]:
        with self._lock:
            latest = self._latest
        if latest is None:
            self.run()
            with self._lock:
                assert self._latest is not None
                latest = self._latest
        return latest
