"""The violations write path alone: batches of 500 matches (50 groups: 50 new, then folds) into SQLite.

Prints wall and CPU (process) time; run it from two checkouts to compare (`python bench/write_path.py`).
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime, timedelta
from types import MappingProxyType

from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.violations import record
from gpuslo.engine.violations import ConditionResult, Explanation, Match

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS, BATCH, GROUPS = 10_000, 500, 50


def _match(event: Event) -> Match:
    return Match("oom", "OOM", "memory", "1", "h", "availability", "99.9%", "critical", f"host={event.host}",
                 MappingProxyType({"host": event.host}), "s", "fix", None,
                 Explanation((ConditionResult("x > 1", "x", 2, True),), (event,), ()), event.time)


def main() -> None:
    database = Database(f"sqlite:///{tempfile.mkdtemp()}/bench.db")
    database.upgrade()
    events = [parse_event({"id": f"e{i}", "kind": "cuda_oom", "time": format_time(T0 + timedelta(seconds=i)),
                           "host": f"n{i % GROUPS}", "gpu": 0, "attrs": {"requested_bytes": 1, "free_bytes": 0}})
              for i in range(EVENTS)]
    with database.session() as session:
        repository.store_events(session, events)
    batches = [[_match(e) for e in events[i:i + BATCH]] for i in range(0, EVENTS, BATCH)]
    wall, cpu = time.perf_counter(), time.process_time()
    for n, batch in enumerate(batches):
        with database.session() as session:
            record(session, batch, now=T0 + timedelta(hours=1, seconds=n), notifying_only=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{len(batches)} batches x {BATCH} matches: {wall:.2f} s wall ({EVENTS / wall:,.0f} matches/s), "
          f"{cpu:.2f} s CPU")
    database.dispose()


if __name__ == "__main__":
    main()
