"""CPU of the engine's write on PostgreSQL, both sides: this thread's and the database backend's, per batch.

Run: PYTHONPATH=bench .venv/bin/python bench/record_pg_cpu.py [--events N] [--batch N] [--stream incidents|mixed]
As bench/record_callgrind.py, on a fresh database: the stream is evaluated and ingested through the core, the first
batch recorded as a warm-up, then every other batch through `EngineStore.record`; around that loop this thread's
`time.thread_time()` (kernel time included) and the utime+stime of the database's backends (/proc/<pid>/stat,
pids from pg_stat_activity; the server must run on this machine). Prints one line. Compare builds A B B A.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import uuid

import engine_workload as workload
import psycopg
from record_callgrind import ROOT
from sqlalchemy import text

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.store.db import Database

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(name: str, items: list[dict[str, object]], batch: int) -> str:
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
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
    with database.engine.connect() as connection:
        pids = [row[0] for row in connection.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = :name"), {"name": name})]
    server, client = {pid: _cpu_s(pid) for pid in pids}, time.thread_time()
    for result in results[1:]:
        core.engine_store.record(result)
    client = time.thread_time() - client
    server_s = sum(_cpu_s(pid) - server[pid] for pid in pids)
    database.engine.dispose()
    count = len(results) - 1
    return (f"client {1e3 * client / count:.2f} ms/batch  server {1e3 * server_s / count:.2f} ms/batch  "
            f"({len(pids)} backends, {count} batches)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--stream", choices=("incidents", "mixed"), default="incidents")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    items = (workload.incidents(args.events, prefix="pc") if args.stream == "incidents"
             else workload.mixed(args.events, prefix="pc", seed=11))
    name = f"gpuslo_pg_cpu_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        print(measure(name, items, args.batch))
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
