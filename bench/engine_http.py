"""The HTTP parts of bench/engine.py: (c) ingest → engine → stored violations, (d) event-to-violation latency.

The real app (create_app on a Gpuslo core) is served in-process by waitress on a free port and driven with httpx
from a client process of its own (engine_load), so that the client does not take the server's GIL.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import engine_workload as workload
import psycopg
from engine_load import clock, posting_process
from sqlalchemy import func, select

from gpuslo.cli.serve import create_wsgi_server, tune_gc_after_startup
from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.engine_process import EngineProcess
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.store.models import ViolationRow
from gpuslo.web import create_app

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


# The engine's mode for the servers below: in the server's process (the default) or in a child process of its
# own (the setting engine_process; engine/engine_process.py). bench/engine.py --engine-process sets it.
ENGINE_PROCESS = False


@contextmanager
def serving(database_url: str, rules_dir: Path) -> Iterator[tuple[Gpuslo, str]]:
    """A Gpuslo core and its web app on waitress at a free port; yields (core, base URL)."""
    # One client stands in for a fleet here, so the per-client ingest rate limit is off (0 = none).
    settings = Settings(database_url=database_url, rules_dir=rules_dir, port=0, ingest_requests_per_second=0.0,
                        engine_process=ENGINE_PROCESS)
    core = Gpuslo.open(settings)
    ready = time.monotonic() + 60  # the engine process starts in a second or so: time it only once it runs
    while not core.engine_health().ok and time.monotonic() < ready:
        time.sleep(0.02)
    server = create_wsgi_server(create_app(settings, core=core), settings)
    tune_gc_after_startup()  # as `gpuslo serve` does once it is up
    thread = threading.Thread(target=server.run, name="bench-waitress", daemon=True)
    thread.start()
    try:
        yield core, f"http://127.0.0.1:{server.effective_port}"
    finally:
        server.close()
        server.task_dispatcher.shutdown()
        thread.join(5)
        core.close()


@contextmanager
def scratch_postgres() -> Iterator[str]:
    """A throw-away PostgreSQL database (trust auth on 127.0.0.1), dropped afterwards."""
    name = f"gpuslo_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def expected_by_rule(rules_dir: Path, items: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The matches per rule a fresh evaluator records for these events, in their order, in the engine's batches."""
    evaluator = RuleEvaluator()
    good, _problems = load_directory(rules_dir)
    evaluator.load(good)
    events = [workload.to_event(item) for item in items]
    counted: Counter[str] = Counter()
    for i in range(0, len(events), 500):
        counted.update(match.rule_id for match in evaluator.evaluate(events[i:i + 500]))
    return dict(counted)


def stored_by_rule(core: Gpuslo) -> dict[str, int]:
    """Stored occurrences per rule."""
    with core.database.session(readonly=True) as session:
        rows = session.execute(select(ViolationRow.rule_id, func.sum(ViolationRow.occurrences))
                               .group_by(ViolationRow.rule_id)).all()
    return {rule_id: int(total) for rule_id, total in rows}


def occurrence_mismatch(stored: dict[str, int], expected: dict[str, int]) -> str:
    """'' when every rule stored exactly the occurrences of the reference, else which rules differ and how."""
    wrong = [f"{rule}: stored {stored.get(rule, 0)}, expected {expected.get(rule, 0)}"
             for rule in sorted(set(stored) | set(expected)) if stored.get(rule, 0) != expected.get(rule, 0)]
    return "; ".join(wrong)


def stored(core: Gpuslo) -> tuple[int, int]:
    """(violations, total occurrences) in the database."""
    with core.database.session(readonly=True) as session:
        count, occurrences = session.execute(
            select(func.count(), func.coalesce(func.sum(ViolationRow.occurrences), 0))).one()
    return int(count), int(occurrences)


def wait_for_engine(core: Gpuslo, timeout: float) -> None:
    """Wait until the engine is idle; fail at once when it reports a failed batch (it would retry forever)."""
    failed = core.metrics.engine_errors.labels("batch")
    deadline = time.monotonic() + timeout
    while not core.wait_idle(timeout=0.05):
        if failed._value.get() > 0:  # noqa: SLF001  # prometheus_client has no public read of one child
            raise RuntimeError("an engine batch failed (its traceback is logged above)")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the engine did not go idle within {timeout:.0f} s")


def encode(items: Sequence[dict[str, Any]], batch: int) -> list[bytes]:
    """The POST bodies: JSON arrays of `batch` events."""
    return [json.dumps(list(items[i:i + batch])).encode() for i in range(0, len(items), batch)]


def ingest_run(database_url: str, rules_dir: Path, items: Sequence[dict[str, Any]], batch: int) -> dict[str, Any]:
    """(c) on one database: POST every batch, wait for the engine, count what was stored."""
    return ingest_bodies(database_url, rules_dir, encode(items, batch), len(items), batch)


def ingest_bodies(database_url: str, rules_dir: Path, bodies: Sequence[bytes], events: int,
                  batch: int) -> dict[str, Any]:
    """(c) on one database with pre-encoded bodies of `events` events in all."""
    with serving(database_url, rules_dir) as (core, base), posting_process(base, bodies) as send:
        child = core.runtime.pid if isinstance(core.runtime, EngineProcess) else None
        cpu_before = process_cpu_s(os.getpid()), process_cpu_s(child)
        started = clock()
        posted = send(started)
        wait_for_engine(core, timeout=max(60.0, events / 200))
        finished = clock()
        server_cpu, child_cpu = process_cpu_s(os.getpid()) - cpu_before[0], process_cpu_s(child) - cpu_before[1]
        violations, occurrences = stored(core)
        by_rule = stored_by_rule(core)
    return {"events": events, "batch": batch, "seconds": finished - started,
            "events_per_s": events / (finished - started), "ingest_events_per_s": events / (posted - started),
            "violations": violations, "occurrences": occurrences, "stored_by_rule": by_rule,
            # CPU of the server's process (every thread) and of the engine process, per event: with a core
            # each, the larger bounds the rate (the database server's own CPU is not counted).
            "server_cpu_us_per_event": 1e6 * server_cpu / events, "engine_cpu_us_per_event": 1e6 * child_cpu / events}


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (every thread), from /proc; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest_parts(rules_dir: Path, count: int, batch: int = 500) -> dict[str, Any]:
    """(c) on SQLite and on PostgreSQL with the same events."""
    items = workload.mixed(count, prefix="http", seed=11)
    expected = expected_by_rule(rules_dir, items)
    bodies = encode(items, batch)
    # The server's garbage collector would scan the workload's dicts too (a cost no real server has); the
    # bodies are bytes, which it does not track.
    del items
    gc.collect()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="gpuslo-bench-") as folder:
        out["sqlite"] = ingest_bodies(f"sqlite:///{folder}/bench.db", rules_dir, bodies, count, batch)
    try:
        with scratch_postgres() as url:
            out["postgresql"] = ingest_bodies(url, rules_dir, bodies, count, batch)
    except psycopg.OperationalError as exc:
        out["postgresql"] = {"error": f"PostgreSQL unavailable: {str(exc).splitlines()[0]}"}
    for part in out.values():
        part["expected_matches"] = sum(expected.values())
        if "stored_by_rule" in part:
            part["mismatch"] = occurrence_mismatch(part["stored_by_rule"], expected)
    return out


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def latency_part(rules_dir: Path, seconds: float, stream: str = "incidents", rate: int = 1000,
                 per_post: int = 10) -> dict[str, Any]:
    """(d): events at `rate`/s, `per_post` per POST; latency from the POST's schedule to the commit of the
    violation each event raised. `stream`: "incidents" (every event raises one) or "fleet" (the mixed stream)."""
    count = int(seconds * rate)
    items = workload.incidents(count) if stream == "incidents" else workload.mixed(count, prefix="lat", seed=5)
    expected = expected_by_rule(rules_dir, items)
    bodies = [json.dumps(items[i:i + per_post]).encode() for i in range(0, len(items), per_post)]
    done: dict[str, float] = {}
    raised: set[str] = set()
    interval_s = per_post / rate
    with tempfile.TemporaryDirectory(prefix="gpuslo-bench-") as folder, \
            serving(f"sqlite:///{folder}/bench.db", rules_dir) as (core, base), \
            posting_process(base, bodies, interval_s=interval_s) as send:
        if isinstance(core.runtime, EngineProcess):  # the child reports each committed batch back
            def reported(ids: Sequence[str], raising: Sequence[str], finished: float) -> None:
                for event_id in ids:
                    done[event_id] = finished
                raised.update(raising)

            core.runtime.report_done(reported)
        else:
            record = core.runtime._sink  # noqa: SLF001  # the core's own sink: it commits the violation rows

            def timed(result: EngineResult) -> None:
                record(result)
                finished = clock()
                for event in result.events:
                    done[event.id] = finished
                batch = {event.id for event in result.events}
                raised.update(e.id for m in result.matches for e in m.explanation.evidence if e.id in batch)

            core.runtime._sink = timed  # noqa: SLF001
        start = clock() + 0.05
        # The client process posts body i at start + i * interval_s (or late, when it falls behind).
        scheduled = {item["id"]: start + (index // per_post) * interval_s for index, item in enumerate(items)}
        child = core.runtime.pid if isinstance(core.runtime, EngineProcess) else None
        cpu_before = process_cpu_s(os.getpid()), process_cpu_s(child)
        sent = send(start)
        wait_for_engine(core, timeout=max(120.0, len(items) / 50))
        server_cpu, child_cpu = process_cpu_s(os.getpid()) - cpu_before[0], process_cpu_s(child) - cpu_before[1]
        reports_due = time.monotonic() + 5  # the engine process's last report may still be on its way
        while len(done) < len(items) and time.monotonic() < reports_due:
            time.sleep(0.01)
        violations, occurrences = stored(core)
        by_rule = stored_by_rule(core)
    if len(done) != len(items):
        raise RuntimeError(f"only {len(done)} of {len(items)} events reached the sink")
    latencies = [(done[i] - scheduled[i]) * 1000 for i in raised]
    return {"stream": stream, "events": len(items), "raising": len(latencies), "target_rate": rate,
            "per_post": per_post, "achieved_rate": len(items) / (sent - start),
            "p50_ms": statistics.median(latencies), "p99_ms": percentile(latencies, 0.99), "max_ms": max(latencies),
            "violations": violations, "occurrences": occurrences, "expected_matches": sum(expected.values()),
            "mismatch": occurrence_mismatch(by_rule, expected),
            # CPU (user + system) of the server's process and of the engine process over the posting part
            "server_cpu_us_per_event": 1e6 * server_cpu / len(items),
            "engine_cpu_us_per_event": 1e6 * child_cpu / len(items)}
