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
from typing import Any

import engine_workload as workload
from engine_http import scratch_postgres
from record_callgrind import warmed_up
from sqlalchemy import make_url, text


def _cpu_s(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, items: list[dict[str, Any]], batch: int) -> str:
    core, database, results = warmed_up(url, items, batch)
    name = make_url(url).database
    with database.engine.connect() as connection:
        pids = [row[0] for row in connection.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = :name"), {"name": name})]
    server, client = {pid: _cpu_s(pid) for pid in pids}, time.thread_time()
    for result in results:
        core.engine_store.record(result)
    client = time.thread_time() - client
    server_s = sum(_cpu_s(pid) - server[pid] for pid in pids)
    database.engine.dispose()
    count = len(results)
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
    with scratch_postgres() as url:
        print(measure(url, items, args.batch))


if __name__ == "__main__":
    main()
