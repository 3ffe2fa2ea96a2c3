"""record_sli per engine batch (the SLI upsert of (d)'s write path): CPU µs of this process per call (the commit's
fsync wait and PostgreSQL's own work excluded), on SQLite and PostgreSQL.

Run it twice, once with this tree and once with a baseline on PYTHONPATH, and compare; each run prints its own
figures (median of 5 rounds of 300 batches, 12 minute buckets each, plus their hour/day roll-ups).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid

from sqlalchemy import create_engine, text

from gpuslo.engine.slo.counter import SliBatch
from gpuslo.engine.slo.store import record_sli
from gpuslo.engine.store.db import Database

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _rounds(database: Database, rounds: int = 5, calls: int = 300) -> float:
    times = []
    minute = 29_000_000
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            minute += 1
            deltas = {("itl", f"endpoint=/{g}", minute - m): [3, 4, 1] for g in range(3) for m in range(4)}
            with database.session() as session:
                record_sli(session, SliBatch(deltas, ()))
        times.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        database = Database(f"sqlite:///{folder}/b.db")
        database.upgrade()
        print(f"sqlite      record_sli {_rounds(database):8.1f} CPU µs/call")
        database.dispose()
    name = f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
    except Exception as exc:  # noqa: BLE001 - the PostgreSQL half is optional
        print(f"postgresql  unavailable: {str(exc).splitlines()[0]}", file=sys.stderr)
        return
    try:
        database = Database(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}")
        database.upgrade()
        print(f"postgresql  record_sli {_rounds(database):8.1f} CPU µs/call")
        database.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


if __name__ == "__main__":
    main()
