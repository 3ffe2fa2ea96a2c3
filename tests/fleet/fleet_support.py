"""Shared by the fleet tests: a deterministic fleet of events over the shipped rulebooks, worker processes,
a PostgreSQL database of their own, and what a run stored, in a form two runs can be compared by."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from postgres_support import scratch_database
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gpuslo.engine.events import format_time
from gpuslo.engine.store.db import Database

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"

ALERTS = ('receivers:\n  - {name: hook, type: webhook, allow_private_network: true, allow_http: true, '
          'url: "http://127.0.0.1:9/never-delivered"}\nroutes:\n  - {receivers: [hook]}\n')


@contextmanager
def postgres_database(label: str, template: str | None = None) -> Iterator[Database]:
    """A fresh, migrated PostgreSQL database, dropped afterwards; a copy of `template` (a database
    postgres_template migrated) when given, which skips the migrations."""
    with scratch_database(f"fleet_{label}", template) as database:
        yield database


@contextmanager
def postgres_template() -> Iterator[str]:
    """A migrated database nobody connects to, for postgres_database(template=) to copy; its name."""
    with postgres_database("template") as database:
        database.dispose()  # CREATE DATABASE … TEMPLATE needs the template without connections
        yield make_url(database.url).database or ""


def fleet_events(hosts: int = 18, minutes: int = 20) -> list[dict[str, Any]]:
    """Heartbeats, OOM storms, graph failures after OOMs, fragmentation that clears and returns, and NCCL hangs
    across hosts of one job; some hosts fall silent. Sorted by time; ids unique."""
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    events: list[dict[str, Any]] = []

    def add(kind: str, host: int, at: float, **fields: Any) -> None:
        events.append({"id": f"{kind}-{host}-{len(events)}", "kind": kind, "host": f"node-{host:03d}",
                       "time": format_time(start + timedelta(seconds=at)), "source": "fleet-test", **fields})

    for h in range(hosts):
        silent_at = 8 * 60 if h % 6 == 0 else minutes * 60
        for at in range(h % 20, silent_at, 20):
            add("probe_status", h, at, attrs={"probe": "nvml", "state": "up"})
        if h % 3 == 0:
            for burst, minute in enumerate((2, 9, 15)):
                pid = 1000 + 10 * h + burst
                for k in range(3):
                    add("cuda_oom", h, minute * 60 + h + 10 * k, gpu=h % 2, pid=pid,
                        attrs={"api": "cudaMalloc", "requested_bytes": 2 << 30, "free_bytes": 1 << 30})
                add("cuda_graph_error", h, minute * 60 + h + 15, gpu=h % 2, pid=pid,
                    attrs={"api": "cudaGraphLaunch", "error_code": 2, "error_name": "cudaErrorMemoryAllocation"})
        for i, at in enumerate(range(30 + h, minutes * 60, 45)):
            ratio = 0.8 if (i // 6) % 2 == 0 else 0.2  # a clear and the next match are 4.5 min apart
            add("mem_fragmentation", h, at, gpu=0,
                attrs={"scope": "allocator", "free_bytes": 4 << 30, "largest_free_bytes": int((1 - ratio) * (4 << 30)),
                       "fragmentation_ratio": ratio})
    for job in range(4):
        ranks = [(job * 6 + r) % hosts for r in range(6)]
        for seq, minute in enumerate((3, 7, 12, 17)):
            for rank, h in enumerate(ranks[: 2 + (seq + job) % 3]):
                add("nccl_timeout", h, minute * 60 + 5 * rank, job=f"job-{job}", rank=rank,
                    attrs={"op": "ALLREDUCE", "seq": 100 + seq, "timeout_ms": 600000, "pg": "0"})
    events.sort(key=lambda e: (e["time"], e["id"]))
    return events


@dataclass(frozen=True)
class Stored:
    """What a run stored: per violation (rule, group key, n-th) its occurrences, status and evidence ids;
    and the notifications as (receiver, action, rule, group key) counts."""

    violations: dict[tuple[str, str, str], tuple[int, str, tuple[str, ...]]]
    notifications: Counter[tuple[str, str, str, str]]

    @property
    def occurrences(self) -> int:
        return sum(v[0] for v in self.violations.values())


def stored(database: Database) -> Stored:
    with database.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT id, rule_id, group_key, first_seen, occurrences, status FROM violations")).all()
        evidence: dict[int, list[str]] = {}
        for violation_id, event_id in connection.execute(text("SELECT violation_id, event_id FROM evidence")):
            evidence.setdefault(violation_id, []).append(event_id)
        notes = connection.execute(text(
            "SELECT n.receiver, n.action, v.rule_id, v.group_key FROM notifications n "
            "JOIN violations v ON v.id = n.violation_id")).all()
    violations = {}
    ordinal: Counter[tuple[str, str]] = Counter()
    # The n-th violation of a rule and group key (in first-seen order): an absence's first-seen is the event
    # time at which a partition noticed the silence, which depends on what else that partition saw.
    for violation_id, rule, key, _first, occurrences, status in sorted(rows, key=lambda r: (str(r[3]), r[0])):
        ordinal[(rule, key)] += 1
        violations[(rule, key, str(ordinal[(rule, key)]))] = (occurrences, status,
                                                              tuple(sorted(evidence.get(violation_id, []))))
    return Stored(violations, Counter((str(r), str(a), str(u), str(k)) for r, a, u, k in notes))


class WorkerProcess:
    """`gpuslo worker` in its own process, as it runs in production; kill() is SIGKILL."""

    def __init__(self, name: str, database: Database, bus: list[str], log_dir: Path, *, partitions: int = 4):
        url = make_url(database.url).update_query_dict({"application_name": f"fleet-{name}"})
        self.name = name
        self._env = {**os.environ, "GPUSLO_DATABASE_URL": url.render_as_string(hide_password=False),
                     "GPUSLO_RULES_DIR": str(RULES), "GPUSLO_ALERTS_CONFIG": str(log_dir / "alerts.yaml"),
                     "GPUSLO_RULES_POLL_SECONDS": "0"}
        (log_dir / "alerts.yaml").write_text(ALERTS)
        self._args = [str(Path(sys.executable).parent / "gpuslo"), "worker", "--bus", ",".join(bus),
                      "--partitions", str(partitions), "--name", name]
        self._log = log_dir / f"worker-{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self._log, "ab") as log:
            self.process = subprocess.Popen(self._args, env=self._env, stdout=log, stderr=log, cwd=ROOT)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
            self.process = None

    def log_text(self) -> str:
        return self._log.read_text(errors="replace") if self._log.exists() else ""


def owned_partitions(database: Database) -> dict[str, int]:
    """Partition locks granted now, by worker (application_name fleet-<name>)."""
    from gpuslo.engine.fleet.ownership import PARTITION_CLASS

    with database.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT a.application_name, count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :cls "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "GROUP BY a.application_name"), {"cls": PARTITION_CLASS}).all()
    return {str(name).removeprefix("fleet-"): int(count) for name, count in rows}


def shared(database: Database, names: set[str], total: int) -> bool:
    """Every partition owned, and every one of `names` owning some: the workers share them by load
    (ownership.assign), so the counts they hold need not be equal."""
    owned = owned_partitions(database)
    return set(owned) == names and sum(owned.values()) == total


def kill_mid_batch(worker: WorkerProcess, database: Database, timeout: float = 30.0) -> None:
    """SIGKILL the worker while one of its transactions has written and not committed (a batch in flight)."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
                 "AND backend_xid IS NOT NULL")
    deadline = time.monotonic() + timeout
    with database.engine.connect() as connection:
        while time.monotonic() < deadline:
            if connection.execute(query, {"name": f"fleet-{worker.name}"}).scalar():
                worker.kill()
                return
            connection.rollback()
    raise AssertionError(f"worker {worker.name} never had a batch in flight within {timeout}s")


def wait_for(condition: Any, timeout: float, what: str, interval: float = 0.1) -> float:
    """Seconds until `condition()` held; AssertionError naming `what` after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f}s")


def reference_run(events: list[dict[str, Any]], folder: Path,
                  read: Callable[[Database], Any] = lambda database: stored(database)) -> Any:
    """The same events through the embedded single process (`gpuslo serve`'s core on SQLite); what `read`
    finds in its database (by default `stored`)."""
    from gpuslo.engine.config import Settings
    from gpuslo.engine.core import Gpuslo
    from gpuslo.engine.metrics import Metrics

    (folder / "alerts.yaml").write_text(ALERTS)
    shm = Path("/dev/shm")  # the reference's commits need no disk: tmpfs where the machine has one
    where = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else folder
    database = Database(f"sqlite:///{where / 'reference.db'}")
    database.upgrade()
    settings = Settings(database_url=database.url, rules_dir=RULES, alerts_config=folder / "alerts.yaml",
                        rules_poll_seconds=0)
    core = Gpuslo(settings, database, Metrics())
    core.rulebooks.reload()
    core.runtime.start()
    try:
        # Chunks of 100 events (20 s of event time), each evaluated before the next: the embedded engine stores a
        # batch's clears after all of its matches, so a batch holding a clear and a later re-match of the same
        # violation would fold instead of resolve + reopen; this fleet's clears and re-matches are minutes apart.
        for start in range(0, len(events), 100):
            core.ingest(events[start:start + 100])
            assert core.wait_idle(60)
        return read(database)
    finally:
        core.close()
        if where != folder:
            shutil.rmtree(where, ignore_errors=True)


def publish(publisher: Any, events: list[dict[str, Any]], batch: int = 250) -> tuple[int, int]:
    """Publish dicts through the fleet publisher (as `serve --bus` does after validating), retrying a batch the
    bus did not acknowledge as an agent's shipper does; returns (duplicates, retries)."""
    from gpuslo.engine.events import parse_event
    from gpuslo.engine.fleet.bus import BusError

    duplicates = retries = 0
    for start in range(0, len(events), batch):
        chunk = [parse_event(e) for e in events[start:start + batch]]
        for _attempt in range(60):
            try:
                duplicates += publisher.publish(chunk).count("duplicate")
                break
            except BusError:
                retries += 1
                time.sleep(0.5)
        else:
            raise AssertionError("the bus refused a batch for 30 s")
    return duplicates, retries


def caught_up(bus: Any, database: Database, table: Any) -> bool:
    """Every partition has stored the newest message of its subject."""
    with database.engine.connect() as connection:
        done = dict(connection.execute(text("SELECT partition, seq FROM fleet_partitions")).tuples().all())
    return all(done.get(p.name, 0) >= bus.last_sequence(p.subject) for p in table.all_partitions())

