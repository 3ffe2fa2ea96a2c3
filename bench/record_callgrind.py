"""Instruction counts of the engine's write alone: `EngineStore.record` per batch, under callgrind.

Run: valgrind --tool=callgrind --dump-before=crc32 --callgrind-out-file=OUT.%p .venv/bin/python
bench/record_callgrind.py [--events N] [--batch N] [--database sqlite|postgresql] [--stream mixed|incidents]
The stream is evaluated by the shipped rulebooks and ingested through the core first; the first batch is recorded
as a warm-up (statement compilation, caches); then `zlib.crc32` marks the start and the end of the recording of
all the other batches, so callgrind dumps them as one part: OUT.<pid>.N with the highest N (OUT.<pid> is the
teardown, OUT.<pid>.1 everything before). Its Ir (`summary:` line) divided by the batches printed is the figure.
Only this process is counted (a PostgreSQL server's own work is not). To compare builds, run each tree's code
(PYTHONPATH) with the same arguments.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import uuid
import zlib
from pathlib import Path

import engine_workload as workload

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.store.db import Database

ROOT = Path(__file__).resolve().parent.parent


def run(url: str, items: list[dict[str, object]], batch: int) -> int:
    good, problems = load_directory(ROOT / "rules")
    if problems:
        raise SystemExit(f"rulebooks do not load: {problems}")
    database = Database(url)
    database.upgrade()
    settings = Settings(database_url=url, rules_dir=ROOT / "rules", port=0, ingest_requests_per_second=0.0)
    core = Gpuslo(settings, database, Metrics())
    core.ingest._submit = lambda events: None  # noqa: SLF001  # no engine thread: batches are recorded below
    evaluator = RuleEvaluator()
    evaluator.load(good)
    events = [workload.to_event(item) for item in items]
    results = [evaluator.evaluate_batch(events[i:i + batch]) for i in range(0, len(events), batch)]
    for start in range(0, len(items), 500):
        core.ingest(items[start:start + 500])
    core.engine_store.record(results[0])
    zlib.crc32(b"start")  # callgrind --dump-before=crc32: what follows is one part
    for result in results[1:]:
        core.engine_store.record(result)
    zlib.crc32(b"end")
    database.engine.dispose()
    return len(results) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--stream", choices=("mixed", "incidents"), default="mixed")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    items = (workload.mixed(args.events, prefix="cg", seed=11) if args.stream == "mixed"
             else workload.incidents(args.events, prefix="cg"))
    if args.database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="gpuslo-callgrind-") as folder:
            batches = run(f"sqlite:///{folder}/bench.db", items, args.batch)
    else:
        import psycopg

        name = f"gpuslo_callgrind_{uuid.uuid4().hex[:10]}"
        admin_url = "postgresql://postgres@127.0.0.1:5432/postgres"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            batches = run(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", items, args.batch)
        finally:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"batches measured: {batches}", file=sys.stderr)


if __name__ == "__main__":
    main()
