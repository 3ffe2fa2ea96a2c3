"""The real app served by a real HTTP server (werkzeug, threaded, 127.0.0.1, a free port), for any test folder."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.serving import make_server

from gpuslo.web import create_app


@contextmanager
def serve(core: Any, settings: Any = None) -> Iterator[str]:
    """Serve an app on `core` (and `settings`, default the core's) at a free loopback port; yields its URL."""
    http = make_server("127.0.0.1", 0, create_app(settings or core.settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_port}"
    finally:
        http.shutdown()
        thread.join(timeout=10)


@contextmanager
def open_and_serve(settings: Any) -> Iterator[tuple[str, Any]]:
    """A real core opened on `settings` and served; yields its URL and the core, and closes both."""
    from gpuslo.engine.core import Gpuslo

    core = Gpuslo.open(settings)
    try:
        with serve(core, settings) as url:
            yield url, core
    finally:
        core.close()
