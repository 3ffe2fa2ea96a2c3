"""Clients of the real app served over real HTTP (live_server.serve), and a login."""

from __future__ import annotations

import re

import httpx
from live_server import serve

__all__ = ["client", "csrf_of", "login", "serve"]


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
