"""`gpuslo agent`: run the probes of a GPU node and ship their events to a gpuslo server."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from pathlib import Path
from types import FrameType

import click

from gpuslo.probes.agent import Agent, AgentConfig, probe_specs
from gpuslo.probes.kinds import PROBE_KINDS


@click.command("agent")
@click.option("--server", default=None, help="Base URL of the gpuslo server, e.g. http://gpuslo:8080.")
@click.option("--bus", "bus_url", envvar="GPUSLO_BUS", default=None, metavar="NATS_URLS",
              help="Fleet mode: publish to NATS JetStream (comma-separated servers) instead of a server.")
@click.option("--token", envvar="GPUSLO_AGENT_TOKEN", default=None,
              help="Bearer token for the ingest API (or GPUSLO_AGENT_TOKEN).")
@click.option("--spool", "spool_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("var/agent-spool.db"), show_default=True,
              help="SQLite file holding events until the server accepted them.")
@click.option("--probe", "probes", multiple=True, metavar="NAME[:ARG]",
              help=f"A probe to run, repeatable; kinds: {', '.join(PROBE_KINDS)} (README lists each one's ARG).")
@click.option("--host", default=None, help="Host name put on every event (default: this machine's).")
@click.option("--ship-interval", type=float, default=2.0, show_default=True,
              help="Seconds between shipping attempts.")
@click.option("--max-spool-events", type=int, default=100_000, show_default=True,
              help="Events the spool holds before it drops new ones (counted and reported).")
def agent(server: str | None, bus_url: str | None, token: str | None, spool_path: Path, probes: tuple[str, ...],
          host: str | None, ship_interval: float, max_spool_events: int) -> None:
    """Run probes on this GPU node and ship their events to --server (or publish them to --bus), spooling them
    while it is away."""
    if (server is None) == (bus_url is None):
        raise click.UsageError("give one of --server URL or --bus NATS_URLS")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = AgentConfig(server=server or "", token=token, spool_path=spool_path,
                         host=host or socket.gethostname(), probes=probe_specs(probes),
                         ship_interval_s=ship_interval, max_spool_events=max_spool_events)
    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    runner = Agent(config)
    bus = None
    if bus_url is not None:
        from gpuslo.cli.agent_bus import BusShipper
        from gpuslo.cli.worker import bus_servers
        from gpuslo.engine.fleet.bus import Bus
        from gpuslo.engine.fleet.publish import Publisher

        bus = Bus(bus_servers(bus_url), name=f"gpuslo-agent-{config.host}")
        runner.shipper.close()
        runner.shipper = BusShipper(runner.spool, runner.shipper.config, Publisher(bus))
    runner.start()
    click.echo(f"gpuslo agent: shipping to {server or bus_url}, spool {spool_path}", err=True)
    try:
        while not stopping.wait(1.0):
            pass
    finally:
        runner.stop()
        if bus is not None:
            bus.close()


if __name__ == "__main__":
    agent()
