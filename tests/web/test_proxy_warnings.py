"""Proxy headers arriving while `trusted_proxies` is empty are warned about, once, by a real server; start-up
warns about a proxy login header without trusted proxies (issue 11: neither was said anywhere)."""

from __future__ import annotations

import logging

from live_support import client, serve

from gpuslo.cli.serve import startup_warnings
from gpuslo.engine.config import Settings


def test_forwarding_headers_without_trusted_proxies_are_warned_about_once(core, caplog):
    caplog.set_level(logging.WARNING, logger="gpuslo.web.access")
    with serve(core) as url, client(url) as http:
        assert http.get("/healthz").status_code == 200
        assert "X-Forwarded-For" not in caplog.text
        for _ in range(3):
            http.get("/healthz", headers={"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"})
    warned = [r for r in caplog.records if "trusted_proxies is empty" in r.getMessage()]
    assert len(warned) == 1 and "X-Forwarded-For" in warned[0].getMessage()


def test_no_warning_once_the_proxy_is_trusted(core, caplog):
    caplog.set_level(logging.WARNING, logger="gpuslo.web.access")
    with serve(core, core.settings.with_overrides(trusted_proxies="127.0.0.1")) as url, client(url) as http:
        http.get("/healthz", headers={"X-Forwarded-For": "203.0.113.9"})
    assert "trusted_proxies is empty" not in caplog.text


def test_startup_warns_about_a_proxy_login_header_without_trusted_proxies():
    assert startup_warnings(Settings()) == []
    (warning,) = startup_warnings(Settings(auth_proxy_header="X-Forwarded-User"))
    assert "log in as anyone" in warning
    assert startup_warnings(Settings(auth_proxy_header="X-Forwarded-User", trusted_proxies="10.0.0.1")) == []
    assert "trusted_proxies empty" in startup_warnings(Settings(host="0.0.0.0"))[0]
