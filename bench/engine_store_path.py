"""CPU of the store path alone, without HTTP: ingest's store of each POST and the engine's write of each batch.

Run: .venv/bin/python bench/engine_store_path.py [--stream incidents|fleet] [--events N] [--post N] [--batch N]
[--database sqlite|postgresql]. The events of bench/engine.py's (d) streams are evaluated up front by a
RuleEvaluator in batches of `--batch` (the engine's batches under (d)'s load are a POST or two); then, on a fresh
database, every POST of `--post` events goes through the core's Ingest (validation and the stored events; its
queue is a no-op here) and every evaluated batch through the core's own EngineStore.record (violations,
evidence, history, outbox, SLI counts, processed_at), each timed with `time.thread_time()` (the CPU of this
thread: SQLite's work included, other tenants of the machine not). Prints one JSON line. To compare two builds,
run them alternately (PYTHONPATH) and compare the medians of a few runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import engine_workload as workload
from engine_http import scratch_postgres

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.store.db import Database

ROOT = Path(__file__).resolve().parent.parent


def evaluated_core(url: str, items: list[dict[str, Any]], batch: int) -> tuple[Gpuslo, Database, list[EngineResult]]:
    """A core on a fresh database at `url` (its ingest queues nothing: no engine thread) and the items evaluated up
    front by a RuleEvaluator of the shipped rulebooks in batches of `batch` (bench/record_*.py use it too)."""
    good, problems = load_directory(ROOT / "rules")
    if problems:
        raise SystemExit(f"rulebooks do not load: {problems}")
    database = Database(url)
    database.upgrade()
    settings = Settings(database_url=url, rules_dir=ROOT / "rules", port=0, ingest_requests_per_second=0.0)
    core = Gpuslo(settings, database, Metrics())
    core.ingest._submit = lambda events: None  # noqa: SLF001  # no engine thread here: batches are fed by the caller
    evaluator = RuleEvaluator()
    evaluator.load(good)
    events = [workload.to_event(item) for item in items]
    return core, database, [evaluator.evaluate_batch(events[i:i + batch]) for i in range(0, len(events), batch)]


def measure(url: str, items: list[dict[str, Any]], post: int, batch: int) -> dict[str, Any]:
    core, database, results = evaluated_core(url, items, batch)
    ingest_cpu, record_cpu = [], []
    posted = 0
    for result in results:
        while posted < len(items) and posted < sum(len(r.events) for r in results[:results.index(result) + 1]):
            chunk = items[posted:posted + post]
            started = time.thread_time()
            report = core.ingest(chunk)
            ingest_cpu.append(time.thread_time() - started)
            if any(r.status != "accepted" for r in report.results):
                raise SystemExit(f"ingest refused events: {report.results[:3]}")
            posted += len(chunk)
        started = time.thread_time()
        core.engine_store.record(result)
        record_cpu.append(time.thread_time() - started)
    matches = sum(len(r.matches) for r in results)
    database.engine.dispose()
    return {"events": len(items), "post": post, "batch": batch, "matches": matches,
            "ingest_us_per_event": 1e6 * sum(ingest_cpu) / len(items),
            "record_us_per_event": 1e6 * sum(record_cpu) / len(items),
            "record_us_per_match": 1e6 * sum(record_cpu) / max(matches, 1),
            "record_batch_median_ms": 1e3 * statistics.median(record_cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stream", choices=("incidents", "fleet"), default="incidents")
    parser.add_argument("--events", type=int, default=6000)
    parser.add_argument("--post", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    items = (workload.incidents(args.events) if args.stream == "incidents"
             else workload.mixed(args.events, prefix="lat", seed=5))
    if args.database == "sqlite":
        with tempfile.TemporaryDirectory(prefix="gpuslo-store-path-") as folder:
            out = measure(f"sqlite:///{folder}/bench.db", items, args.post, args.batch)
    else:
        with scratch_postgres() as url:
            out = measure(url, items, args.post, args.batch)
    out.update(stream=args.stream, database=args.database)
    print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}), file=sys.stdout)


if __name__ == "__main__":
    main()
