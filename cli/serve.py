"""`gpuslo serve`: the Flask app on waitress, with a clean shutdown on SIGTERM and SIGINT."""

from __future__ import annotations

import gc
import logging
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from gpuslo.engine.config import Settings
from gpuslo.engine.errors import ConfigError

log = logging.getLogger("gpuslo.serve")

SERVER_THREADS = 8
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """INFO to stderr; Alembic's plugin set-up lines are noise at every start."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # a line per job run every few seconds


class _Shutdown(SystemExit):
    """Raised from the signal handler in the main thread; waitress's loop stops on SystemExit."""


def _install_handlers(reload: Callable[[], object]) -> Callable[[], None]:
    """SIGTERM and SIGINT stop cleanly, SIGHUP reloads the rulebooks; returns a function restoring the handlers."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        raise _Shutdown(0)

    def hang_up(_signum: int, _frame: FrameType | None) -> None:
        log.info("received SIGHUP, reloading the rulebooks")
        threading.Thread(target=reload, name="gpuslo-sighup-reload", daemon=True).start()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, hang_up)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def create_wsgi_server(app: Any, settings: Settings) -> Any:
    """A waitress server bound to settings.host:settings.port (port 0 picks a free one)."""
    import waitress

    try:
        return waitress.create_server(app, host=settings.host, port=settings.port, threads=SERVER_THREADS,
                                      ident="gpuslo")
    except OSError as exc:
        raise ConfigError(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from exc


# Young collections every 2,000 allocations (not 700), full ones after 100 middle ones (not 10): at 1,000
# violations a second the defaults made a 20-80 ms full collection every ~2 s, the largest part of the p99
# latency (bench/RESULTS.md, (d)); cycles are still collected, only less often.
GC_THRESHOLDS = (2000, 10, 100)


def tune_gc_after_startup() -> None:
    """Leave everything made at start-up (modules, app, compiled rulebooks) out of the cyclic GC's scans, and
    collect less often (GC_THRESHOLDS).

    Full collections kept re-scanning those objects from whichever thread triggered them, mostly HTTP
    workers: ~14 % of the ingest benchmark's GIL time (bench/RESULTS.md). They live as long as the process.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def start_local_probes(probes: Sequence[str], server_url: str, token: str | None) -> Any:
    """The node agent inside `serve`: the same probes, spool and shipper, posting to this server."""
    from gpuslo.probes.agent import Agent, AgentConfig, probe_specs

    agent = Agent(AgentConfig(server=server_url, spool_path=Path("var") / "serve-probes-spool.db",
                              host=socket.gethostname(), token=token, probes=probe_specs(probes)))
    agent.start()
    log.info("local probes started: %s", ", ".join(probes))
    return agent


def startup_warnings(settings: Settings) -> list[str]:
    """What a start-up with these settings should warn about (the database's own checks are in the core)."""
    found = []
    if settings.auth_proxy_header and not settings.trusted_proxies:
        found.append(f"auth_proxy_header is {settings.auth_proxy_header!r} but trusted_proxies is empty: any client "
                     "that reaches gpuslo directly can send that header and log in as anyone; list the proxy's "
                     "address in trusted_proxies")
    if not settings.trusted_proxies and settings.host not in ("127.0.0.1", "::1", "localhost"):
        found.append(f"listening on {settings.host} with trusted_proxies empty: behind a reverse proxy every client "
                     "is recorded and rate-limited under the proxy's address (requests carrying X-Forwarded-For "
                     "will be logged once)")
    return found


def run_server(settings: Settings, probes: Sequence[str] = (), probe_token: str | None = None,
               bus_url: str | None = None) -> None:
    """Open the core (migrates the database, loads rulebooks), serve until a signal, then close it all.

    With `bus_url` (fleet mode) ingest publishes to the bus and the periodic jobs run only in the fleet leader.
    """
    from gpuslo.engine.core import Gpuslo
    from gpuslo.web import create_app

    for warning in startup_warnings(settings):
        log.warning("%s", warning)
    fleet = open_fleet_replica(settings, bus_url) if bus_url else None
    core = Gpuslo.open(settings, publish=fleet.publish, leader=fleet.lead) if fleet else Gpuslo.open(settings)
    agent = None
    try:
        server = create_wsgi_server(create_app(settings, core=core), settings)
        restore = _install_handlers(core.rulebooks.reload)
        tune_gc_after_startup()
        try:
            log.info("gpuslo listening on http://%s:%s (database %s, rules %s)", server.effective_host,
                     server.effective_port, _safe_url(settings.database_url), settings.rules_dir)
            if probes:
                local = f"http://127.0.0.1:{server.effective_port}"
                agent = start_local_probes(probes, local, probe_token)
            server.run()
        except _Shutdown:
            pass
        finally:
            restore()
            server.close()
            # waitress's run() swallows SystemExit after shutting its workers down; stop them if it did not.
            server.task_dispatcher.shutdown()
    finally:
        if agent is not None:
            agent.stop()
        core.close()
        if fleet is not None:
            fleet.close()
        log.info("gpuslo stopped")


class FleetReplica:
    """What `serve --bus` adds: the bus publisher, and the leader lock that gates the periodic jobs."""

    def __init__(self, settings: Settings, bus_url: str):
        from gpuslo.cli.worker import bus_servers
        from gpuslo.engine.fleet.bus import Bus
        from gpuslo.engine.fleet.ownership import Ownership
        from gpuslo.engine.fleet.publish import Publisher
        from gpuslo.engine.store.db import Database

        self._database = Database(settings.database_url)
        self._bus = Bus(bus_servers(bus_url), name=f"gpuslo-serve-{socket.gethostname()}")
        self.publish = Publisher(self._bus).publish
        self._ownership = Ownership(self._database, f"serve-{socket.gethostname()}", member=False)
        self._lock = threading.Lock()

    def lead(self) -> bool:
        """Whether this replica leads the fleet now (re-joining after a lost lock connection)."""
        with self._lock:
            try:
                if not self._ownership.connected:
                    self._ownership.join()
                return self._ownership.lead()
            except Exception:  # noqa: BLE001 - no database now: not the leader; the job runs elsewhere or later
                log.exception("fleet leader lock")
                return False

    def close(self) -> None:
        self._ownership.leave()
        self._bus.close()
        self._database.dispose()


def open_fleet_replica(settings: Settings, bus_url: str) -> FleetReplica:
    return FleetReplica(settings, bus_url)


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
