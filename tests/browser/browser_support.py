"""Shared by the browser tests: Debian's Chromium, its flags, and the real app served on a free local port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server

from gpuslo.engine.config import Settings
from gpuslo.web import create_app

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this machine refuses.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_chromium() -> None:
    """Fail (never skip) when Chromium is missing: the install step provides it."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run the install step (apt-get install chromium); browser tests are "
                    "never skipped.", pytrace=False)


@contextmanager
def serving(settings: Settings, check: Any = None) -> Iterator[tuple[str, Any]]:
    """Open the real core and app and serve them on 127.0.0.1:<free port>; yields the base URL and the core."""
    from gpuslo.engine.core import Gpuslo

    core = Gpuslo.open(settings)
    if check is not None:
        check(core)
    http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_port}", core
    finally:
        http.shutdown()
        thread.join(timeout=10)
        core.close()
