"""A real HTTP server (werkzeug, threaded, 127.0.0.1) around the real app, and a login over real HTTP."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
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


def client(url: str, source: str = "127.0.0.1") -> httpx.Client:
    """An HTTP client whose connections leave from `source` (any 127.0.0.0/8 address on Linux)."""
    return httpx.Client(base_url=url, transport=httpx.HTTPTransport(local_address=source), timeout=10)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, "no CSRF token on the page"
    return found.group(1)


def login(http: httpx.Client, user: str, password: str) -> httpx.Response:
    token = csrf_of(http.get("/login").text)
    return http.post("/login", data={"username": user, "password": password, "csrf_token": token})
