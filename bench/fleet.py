"""Fleet mode: events/s per worker from the bus to stored violations, against in-process evaluation in the same run.

Writes the section "## Fleet (bench/fleet.py)" of bench/RESULTS.md. Starts its own 3-node NATS JetStream cluster
(R3 stream) on free loopback ports and uses scratch PostgreSQL databases on 127.0.0.1:5432, dropped afterwards.

  python bench/fleet.py [--events 20000] [--workers 1 2] [--partitions 8] [--profile DIR]

Besides the wall-clock rates it reports the CPU time per event of the workers and of their PostgreSQL backends
(from /proc, over the measured span), which a shared machine's load does not inflate as much. `--profile DIR`
samples every worker with py-spy (raw collapsed stacks, DIR/worker-<k>w-<i>.txt; py-spy must be installed).
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for helpers in ("tests", "tests/fleet"):  # the test suite's cluster, worker-process and PostgreSQL helpers
    sys.path.insert(0, str(ROOT / helpers))

import engine_workload as workload  # noqa: E402
from fleet_cluster_support import NatsCluster  # noqa: E402
from fleet_support import RULES, WorkerProcess, caught_up, owned_partitions, postgres_database  # noqa: E402
from sqlalchemy import text  # noqa: E402

from gpuslo.engine.config import Settings  # noqa: E402
from gpuslo.engine.core import Gpuslo  # noqa: E402
from gpuslo.engine.events import Event  # noqa: E402
from gpuslo.engine.fleet.bus import Bus, StreamSettings  # noqa: E402
from gpuslo.engine.fleet.publish import Publisher  # noqa: E402
from gpuslo.engine.fleet.routing import RoutingTable  # noqa: E402
from gpuslo.engine.metrics import Metrics  # noqa: E402
from gpuslo.engine.rulebook import load_directory  # noqa: E402
from gpuslo.engine.runtime import RuleEvaluator  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
SECTION = "## Fleet (bench/fleet.py)"


def in_process_evaluation(events: list, rulebooks: Sequence) -> float:  # type: ignore[type-arg]
    """RuleEvaluator alone (no store), batches of 500: events/s."""
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    started = time.perf_counter()
    for start in range(0, len(events), 500):
        evaluator.evaluate_batch(events[start:start + 500])
    return len(events) / (time.perf_counter() - started)


def in_process_stored(items: list[dict], events: int) -> tuple[float, int, tuple[int, int]]:  # type: ignore[type-arg]
    """The embedded core (`gpuslo serve` without HTTP) on PostgreSQL: ingest stores, the engine evaluates and
    stores the violations and SLI counts; events/s, the occurrences and the SLI (good, total) stored."""
    with postgres_database("bench_embedded") as database:
        core = Gpuslo(Settings(database_url=database.url, rules_dir=RULES, rules_poll_seconds=0), database,
                      Metrics())
        core.rulebooks.reload()
        core.runtime.start()
        try:
            started = time.perf_counter()
            for start in range(0, len(items), 500):
                core.ingest(items[start:start + 500])
            assert core.wait_idle(600)
            elapsed = time.perf_counter() - started
            return events / elapsed, _occurrences(database), _sli_counts(database)
        finally:
            core.close()


def _occurrences(database) -> int:  # type: ignore[no-untyped-def]
    with database.engine.connect() as connection:
        return int(connection.execute(text("SELECT coalesce(sum(occurrences), 0) FROM violations")).scalar() or 0)


def _sli_counts(database) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    with database.engine.connect() as connection:
        good, total = connection.execute(text(
            "SELECT coalesce(sum(good), 0), coalesce(sum(total), 0) FROM slo_buckets")).one()
    return int(good), int(total)


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backends(database, names: Sequence[str]) -> list[int]:  # type: ignore[no-untyped-def]
    """The PostgreSQL backend pids of the workers (application_name fleet-<name>)."""
    with database.engine.connect() as connection:
        return [int(pid) for pid in connection.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE application_name = ANY(:names)"),
            {"names": [f"fleet-{n}" for n in names]}).scalars()]


def _profile(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling one worker until SIGINT (then it writes the collapsed stacks)."""
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid), "--format", "raw",
               "--rate", "250", "--output", str(out), "--nonblocking"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def _start_gate(database, table: RoutingTable, procs: Sequence[WorkerProcess]) -> Iterator[Callable[[], None]]:  # type: ignore[no-untyped-def]
    """Start the workers while holding every partition until all are members, let them claim their shares
    while the offsets table is locked (each blocks opening its first partition), and yield the function that lets
    them all go at once: no worker starts before the others have their shares."""
    from gpuslo.engine.fleet.ownership import MEMBER_CLASS, PARTITION_CLASS

    numbers = [p.number for p in table.all_partitions()]
    held = database.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    gate = database.engine.connect()
    try:
        for number in numbers:
            held.execute(text("SELECT pg_advisory_lock(:cls, :key)"), {"cls": PARTITION_CLASS, "key": number})
        for proc in procs:
            proc.start()
        workers = len(procs)
        members = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :cls "
                       "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")
        while held.execute(members, {"cls": MEMBER_CLASS}).scalar() != workers:
            time.sleep(0.02)
        # A rebalance that counted the members before the last one joined must be over before the partitions
        # are let go: it would claim them all (and then block opening them, the others waiting forever). And
        # the first member must have written the loads of these members, the others read them (worker._loads).
        time.sleep(3.0)
        gate.execute(text("LOCK TABLE fleet_partitions IN ACCESS EXCLUSIVE MODE"))
        held.execute(text("SELECT pg_advisory_unlock_all()"))  # each worker claims its part (ownership.assign)
        # A worker whose rebalance was under way when they were let go may have missed some; it claims them at
        # its next rebalance, which waits for the gate (it blocks opening its first partition): go without them.
        deadline = time.monotonic() + 5
        while True:
            owned = owned_partitions(database)
            # Every partition owned, by every worker: each claims only its part of the assignment (by load,
            # ownership.assign), so the counts they hold differ and none holds another's.
            if len(owned) == workers and sum(owned.values()) == len(numbers):
                break
            if time.monotonic() > deadline:
                print(f"start gate: only {owned} of {len(numbers)} partitions claimed; the rest follow within a "
                      f"rebalance interval", flush=True)
                break
            time.sleep(0.02)
        yield gate.commit
    finally:
        held.invalidate()  # closed for good: back in the pool, a session lock would stay held
        gate.close()


def fleet_run(cluster: NatsCluster, table: RoutingTable, workers: int, partitions: int, folder: Path,
              bus: Bus, profile: Path | None = None, live: Sequence[Event] = ()
              ) -> tuple[float, int, tuple[int, int], tuple[float, float]]:
    """k workers drain the (already published) stream into a fresh database, all starting at once with their
    fair shares (_start_gate): the seconds it took, the occurrences and the SLI (good, total) stored, and the
    CPU seconds (workers, their database backends). `live`: events published once they run (the stream is
    empty before), so each step reads what came since the last."""
    with postgres_database(f"bench_fleet{workers}") as database:
        procs = [WorkerProcess(f"b{i}", database, cluster.urls, folder, partitions=partitions)
                 for i in range(workers)]
        spies: list[subprocess.Popen[bytes]] = []
        try:
            with _start_gate(database, table, procs) as go:
                pids = [proc.process.pid for proc in procs if proc.process is not None]
                if profile is not None:
                    spies = [_profile(pid, profile / f"worker-{workers}w-{i}.txt") for i, pid in enumerate(pids)]
                backends = _backends(database, [proc.name for proc in procs])
                cpu0 = sum(map(_cpu_seconds, pids)), {pid: _cpu_seconds(pid) for pid in backends}
                started = time.perf_counter()
                go()
            _publish(Publisher(bus), live)
            while not caught_up(bus, database, table):
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            backends = sorted(set(backends) | set(_backends(database, [proc.name for proc in procs])))
            worker_cpu = sum(map(_cpu_seconds, pids)) - cpu0[0]
            backend_cpu = sum(_cpu_seconds(pid) - cpu0[1].get(pid, 0.0) for pid in backends)
            return elapsed, _occurrences(database), _sli_counts(database), (worker_cpu, backend_cpu)
        finally:
            for spy in spies:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            for proc in procs:
                proc.stop()


def _publish(publisher: Publisher, events: Sequence[Event]) -> None:
    for start in range(0, len(events), 1000):
        publisher.publish(events[start:start + 1000])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--profile", type=Path, default=None, help="sample each worker with py-spy into DIR")
    parser.add_argument("--live", action="store_true",
                        help="also measure each worker count with the events published while the workers run")
    args = parser.parse_args(argv)
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    rulebooks = load_directory(RULES)[0]
    table = RoutingTable.of(rulebooks, args.partitions)
    items = workload.mixed(args.events)
    events = [workload.to_event(item) for item in items]
    uptimes = [_uptime()]
    evaluate_rate = max(in_process_evaluation(events, rulebooks) for _ in range(2))
    embedded_rate, embedded_occurrences, embedded_sli = in_process_stored(items, len(events))
    copies = sum(len(table.route(e)) for e in events)
    folder = Path(tempfile.mkdtemp(prefix="gpuslo-bench-fleet-"))
    cluster = NatsCluster.create(folder / "nats")
    cluster.start()
    rows = []
    try:
        bus = Bus(cluster.urls, name="bench")
        bus.ensure_stream(StreamSettings(replicas=3))
        bus.put_routes(table)
        started = time.perf_counter()
        _publish(Publisher(bus), events)
        publish_rate = len(events) / (time.perf_counter() - started)
        runs = [(workers, False) for workers in args.workers]
        runs += [(workers, True) for workers in args.workers] if args.live else []
        for workers, live in runs:
            if live:  # an empty stream: the events come while the workers run
                bus.drop_stream()
                bus.ensure_stream(StreamSettings(replicas=3))
                bus.put_routes(table)
            elapsed, occurrences, sli, cpu = fleet_run(cluster, table, workers, args.partitions, folder, bus,
                                                       args.profile, events if live else ())
            rate = len(events) / elapsed
            per_event = (cpu[0] / len(events) * 1e6, cpu[1] / len(events) * 1e6)
            rows.append((workers, rate, rate / workers, occurrences, sli, per_event, live))
            print(f"{workers} worker(s){' live' if live else ''}: {rate:,.0f} ev/s, {rate / workers:,.0f} per worker, "
                  f"{occurrences} occurrences (embedded: {embedded_occurrences}), SLI good/total {sli} "
                  f"(embedded: {embedded_sli}); CPU per event: workers {per_event[0]:.0f} µs, their PostgreSQL "
                  f"backends {per_event[1]:.0f} µs", flush=True)
        bus.close()
    finally:
        cluster.stop()
    uptimes.append(_uptime())
    report(args, evaluate_rate, embedded_rate, (embedded_occurrences, embedded_sli), publish_rate, copies,
           len(events), rows, uptimes)


def report(args: argparse.Namespace, evaluate_rate: float, embedded_rate: float,
           embedded: tuple[int, tuple[int, int]], publish_rate: float, copies: int, events: int,
           rows: list[tuple[int, float, float, int, tuple[int, int], tuple[float, float], bool]],
           uptimes: list[str]) -> None:
    embedded_occurrences, embedded_sli = embedded
    one = rows[0][2] if rows else 0.0
    lines = [SECTION, "",
             f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Machine: {platform.system()} {platform.release()}, "
             f"{os.cpu_count()} vCPU (shared with other tenants: expect ±30 % run to run), Python "
             f"{platform.python_version()}; nats-server, PostgreSQL and every worker on the same machine.",
             f"Command: `python bench/fleet.py --events {events} --workers {' '.join(map(str, args.workers))} "
             f"--partitions {args.partitions}{' --live' if args.live else ''}`.",
             f"`uptime` before: `{uptimes[0]}`; after: `{uptimes[-1]}`.", "",
             "| part | events/s | ratio |", "|---|---|---|",
             f"| in-process evaluation (RuleEvaluator, no store) | {evaluate_rate:,.0f} | baseline A |",
             f"| in-process, stored: the embedded core on PostgreSQL (ingest stores, engine, violations stored) | "
             f"{embedded_rate:,.0f} | baseline B |",
             f"| publish to the R3 stream ({copies / events:.2f} copies per event, acks awaited) | "
             f"{publish_rate:,.0f} | |"]
    for workers, rate, per_worker, occurrences, sli, per_event, live in rows:
        check = "equal" if occurrences == embedded_occurrences else f"DIFFER ({embedded_occurrences} embedded)"
        sli_check = "equal" if sli == embedded_sli else f"DIFFER ({embedded_sli[0]}/{embedded_sli[1]} embedded)"
        when = ", live: published while they run" if live else ""
        base = next((r[2] for r in rows if r[6] == live), one)  # the same kind's first row (1 worker)
        lines.append(f"| {workers} worker(s){when}: bus → stored violations and SLI counts ({occurrences} occurrences, "
                     f"{check}; SLI good/total {sli[0]}/{sli[1]}, {sli_check}) | "
                     f"{rate:,.0f} in all, {per_worker:,.0f} per worker | per worker / B = "
                     f"{per_worker / embedded_rate:.2f} (target >= 0.5); / A = {per_worker / evaluate_rate:.2f}; "
                     f"scaling efficiency {per_worker / base:.2f}; CPU per event: workers {per_event[0]:.0f} µs, "
                     f"their PostgreSQL backends {per_event[1]:.0f} µs |")
    best_workers, best = max(((row[0], row[1]) for row in rows if not row[6]), key=lambda pair: pair[1],
                             default=(0, 0.0))
    lines += ["", f"At one event per GPU per second, one worker here keeps up with about {one:,.0f} GPUs and "
              f"the best run ({best_workers} workers) with about {best:,.0f}.", "",
              "Method: the workload of bench/engine.py (fleet mix, 64 hosts × 8 GPUs, all shipped rulebooks) is "
              "published once (one message per subject and publish of 1,000 events); for each worker count, that "
              "many `gpuslo worker` processes start on a fresh PostgreSQL database (so every partition starts at "
              "sequence 0, no replay); the bench holds every partition until all are members and lets them go "
              "at once with their fair shares claimed, and the clock runs from then until every partition has "
              "stored the last sequence of its subject. Each worker stores the events its output cites (evidence, "
              "clears that resolve, errors: the stream is the event log), the violations, evidence, history, "
              "outbox rows, SLI counts and offsets in one transaction per step. CPU per event: user + system "
              "time of the worker processes and of their PostgreSQL backends over the measured span, over the "
              "events (not copies); evaluation A costs 1/A per event on one core. Occurrences and SLI "
              "good/total are compared with the embedded run's."]
    text_ = "\n".join(lines) + "\n"
    print(text_)
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    if SECTION in old:
        head, rest = old.split(SECTION, 1)
        following = rest.find("\n## ")
        new = head + text_ + (rest[following:] if following >= 0 else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text_
    RESULTS.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
