"""`gpuslo worker`: an engine worker of a fleet (NATS JetStream in, PostgreSQL out); see docs/fleet.md."""

from __future__ import annotations

import signal
import threading
from dataclasses import replace
from types import FrameType

import click

from gpuslo.engine.config import Settings


def bus_servers(url: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` → the servers to try, in order."""
    return [part.strip() for part in url.split(",") if part.strip()]


@click.command("worker")
@click.option("--bus", "bus_url", envvar="GPUSLO_BUS", required=True, metavar="NATS_URLS",
              help="NATS servers, comma-separated, e.g. nats://n1:4222,nats://n2:4222 (or $GPUSLO_BUS).")
@click.option("--partitions", type=click.IntRange(1, 4096), default=16, show_default=True,
              help="Partitions per key space; every worker of a fleet must use the same number.")
@click.option("--name", default=None, help="Worker name in logs and the partition table (default: host-pid).")
@click.option("--replicas", type=click.IntRange(1, 5), default=3, show_default=True,
              help="Replicas of the stream and bucket when this worker creates them.")
@click.option("--store-events", type=click.Choice(["evidence", "all"]), default="evidence", show_default=True,
              envvar="GPUSLO_FLEET_STORE_EVENTS",
              help="Events kept in PostgreSQL: those violations cite (the stream is the event log), or all.")
@click.pass_context
def worker(ctx: click.Context, bus_url: str, partitions: int, name: str | None, replicas: int,
           store_events: str) -> None:
    """Evaluate a fair share of the rules' partitions from the bus and store the violations in PostgreSQL."""
    from gpuslo.cli.serve import configure_logging, tune_gc_after_startup
    from gpuslo.engine.fleet.bus import Bus, StreamSettings
    from gpuslo.engine.fleet.partition import PartitionSettings
    from gpuslo.engine.fleet.worker import Worker, WorkerSettings
    from gpuslo.engine.store.db import Database

    configure_logging()
    settings: Settings = ctx.find_root().obj
    fleet = WorkerSettings(partitions=partitions, stream=StreamSettings(replicas=replicas),
                           partition=PartitionSettings(store_events=store_events))
    if name:
        fleet = replace(fleet, name=name)
    database = Database(settings.database_url)
    database.upgrade()
    bus = Bus(bus_servers(bus_url), name=f"gpuslo-worker-{fleet.name}")
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        runner = Worker(settings, bus, database, fleet)
        runner.prepare()
        # As `gpuslo serve` does once up: the start-up objects (modules, compiled rulebooks, routing table) out
        # of the cyclic GC's scans, and collections less often; the decoded messages and built events of every
        # batch triggered young-generation collections that rescanned them.
        tune_gc_after_startup()
        click.echo(f"gpuslo worker {fleet.name}: {len(runner.table.all_partitions())} partitions in "
                   f"{len(runner.table.spaces)} key spaces", err=True)
        runner.run(stop)
    finally:
        bus.close()
        database.dispose()
