"""How long one ingest transaction holds SQLite's write lock for a 500-event POST: the events' canonical JSON
built inside it (as before 2026-12-01) against built before it (`repository.event_bodies`, engine/ingest.py).

Run: .venv/bin/python bench/engine_store_lock.py [--batches 40]. Prints the median lock hold per batch, each
way, alternating within the run (shared machine), with `uptime`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_workload as workload  # noqa: E402

from gpuslo.engine.store import repository  # noqa: E402
from gpuslo.engine.store.db import Database  # noqa: E402

BATCH = 500


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args(argv)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    database = Database(f"sqlite:///{tempfile.mkdtemp()}/bench.db")
    database.upgrade()
    events = [workload.to_event(item) for item in workload.mixed(2 * args.batches * BATCH)]
    held: dict[str, list[float]] = {"inside": [], "before": []}
    for n in range(2 * args.batches):
        batch = events[n * BATCH:(n + 1) * BATCH]
        way = "inside" if n % 2 == 0 else "before"
        bodies = repository.event_bodies(batch) if way == "before" else None
        started = time.perf_counter()
        with database.session() as session:
            statuses = repository.store_events(session, batch, bodies=bodies)
        held[way].append(time.perf_counter() - started)
        assert statuses == ["accepted"] * len(batch)
    inside, before = (statistics.median(held[w]) * 1e3 for w in ("inside", "before"))
    print(f"write lock held per {BATCH}-event batch (median of {args.batches}): bodies built inside "
          f"{inside:.2f} ms, before {before:.2f} ms -> {inside / before:.2f}x shorter")
    database.dispose()


if __name__ == "__main__":
    main()
