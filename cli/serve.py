"""`gpuslo serve`: the Flask app on waitress, with a clean shutdown on SIGTERM and SIGINT."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
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


class _Shutdown(SystemExit):
    """Raised from the signal handler in the main thread; waitress's loop stops on SystemExit."""


def _install_handlers() -> Callable[[], None]:
    """Route SIGTERM and SIGINT to a clean stop; returns a function that restores the previous handlers."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        raise _Shutdown(0)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}

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


def run_server(settings: Settings) -> None:
    """Open the core (migrates the database, loads rulebooks), serve until a signal, then close it all."""
    from gpuslo.engine.service import Gpuslo
    from gpuslo.web import create_app

    core = Gpuslo.open(settings)
    try:
        server = create_wsgi_server(create_app(settings, core=core), settings)
        restore = _install_handlers()
        try:
            log.info("gpuslo listening on http://%s:%s (database %s, rules %s)", server.effective_host,
                     server.effective_port, _safe_url(settings.database_url), settings.rules_dir)
            server.run()
        except _Shutdown:
            pass
        finally:
            restore()
            server.close()
            # waitress's run() swallows SystemExit after shutting its workers down; stop them if it did not.
            server.task_dispatcher.shutdown()
    finally:
        core.close()
        log.info("gpuslo stopped")


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
