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
import zlib
from typing import Any

import engine_workload as workload
from engine_http import scratch_postgres
from engine_store_path import evaluated_core

from gpuslo.engine.core import Gpuslo
from gpuslo.engine.runtime import EngineResult
from gpuslo.engine.store.db import Database


def warmed_up(url: str, items: list[dict[str, Any]], batch: int) -> tuple[Gpuslo, Database, list[EngineResult]]:
    """The items evaluated in batches of `batch` and ingested through a fresh core at `url`, the first batch
    recorded as a warm-up; the other batches, still to record (bench/record_pg_cpu.py uses it too)."""
    core, database, results = evaluated_core(url, items, batch)
    for start in range(0, len(items), 500):
        core.ingest(items[start:start + 500])
    core.engine_store.record(results[0])
    return core, database, results[1:]


def run(url: str, items: list[dict[str, Any]], batch: int) -> int:
    core, database, results = warmed_up(url, items, batch)
    zlib.crc32(b"start")  # callgrind --dump-before=crc32: what follows is one part
    for result in results:
        core.engine_store.record(result)
    zlib.crc32(b"end")
    database.engine.dispose()
    return len(results)


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
        with scratch_postgres() as url:
            batches = run(url, items, args.batch)
    print(f"batches measured: {batches}", file=sys.stderr)


if __name__ == "__main__":
    main()
