"""Client addresses behind trusted reverse proxies: audit, bootstrap and the proxy user header see the client."""

from __future__ import annotations

import json

import pytest
from access_support import CSRF, act_as, create_accounts
from werkzeug.test import create_environ, run_wsgi_app

from gpuslo.engine.errors import ConfigError
from gpuslo.engine.store import audit
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.web import create_app
from gpuslo.web.proxies import TrustedProxies, trusted_networks

PROXY = "10.0.0.5"


def _seen(setting: str, peer: str, headers: dict[str, str]) -> dict[str, str]:
    """What an application behind the middleware sees of a request from `peer` with these headers."""
    def echo(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"remote_addr": environ["REMOTE_ADDR"], "scheme": environ["wsgi.url_scheme"]}).encode()]

    environ = create_environ("/", headers=headers, environ_base={"REMOTE_ADDR": peer})
    body, _status, _headers = run_wsgi_app(TrustedProxies(echo, trusted_networks(setting)), environ)
    return json.loads(b"".join(body))


def test_a_trusted_proxy_forwards_the_client_address_and_scheme():
    forwarded = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}
    assert _seen("10.0.0.0/24, 127.0.0.1", PROXY, forwarded) == {"remote_addr": "203.0.113.7", "scheme": "https"}


def test_the_chain_is_read_from_the_right_skipping_trusted_hops_only():
    chain = {"X-Forwarded-For": "198.51.100.1, 203.0.113.7, 10.0.0.9"}  # spoofed first hop, client, inner proxy
    assert _seen("10.0.0.0/24", PROXY, chain)["remote_addr"] == "203.0.113.7"
    garbage = {"X-Forwarded-For": "not-an-ip, 10.0.0.9"}
    assert _seen("10.0.0.0/24", PROXY, garbage)["remote_addr"] == "10.0.0.9"
    assert _seen("10.0.0.0/24", PROXY, {})["remote_addr"] == PROXY  # a trusted peer that forwards nothing


def test_an_untrusted_peer_cannot_choose_its_address_or_scheme():
    forged = {"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "https"}
    assert _seen("10.0.0.0/24", "192.0.2.50", forged) == {"remote_addr": "192.0.2.50", "scheme": "http"}


def test_an_ipv6_proxy_network_is_understood():
    assert _seen("fd00::/8", "fd00::1", {"X-Forwarded-For": "2001:db8::7"})["remote_addr"] == "2001:db8::7"


def test_without_the_setting_the_app_is_not_wrapped(core):
    assert not isinstance(create_app(core.settings, core=core).wsgi_app, TrustedProxies)
    wrapped = create_app(core.settings.with_overrides(trusted_proxies="127.0.0.1"), core=core)
    assert isinstance(wrapped.wsgi_app, TrustedProxies)


def test_a_remote_client_behind_a_loopback_proxy_gets_no_bootstrap_mode(core):
    client = create_app(core.settings.with_overrides(trusted_proxies="127.0.0.1"), core=core).test_client()
    assert client.get("/api/v1/violations").status_code == 200  # loopback itself: bootstrap
    remote = client.get("/api/v1/violations", headers={"X-Forwarded-For": "203.0.113.7"})
    assert remote.status_code == 401


def test_the_proxy_user_header_is_believed_only_from_a_listed_proxy_and_the_audit_names_the_client(core):
    create_accounts(core.database)
    settings = core.settings.with_overrides(auth_proxy_header="X-Forwarded-User", auth_proxy_role_header="X-Role",
                                            trusted_proxies="10.0.0.0/24")
    client = create_app(settings, core=core).test_client()
    act_as(client, None)
    admin = {"X-Forwarded-User": "carol", "X-Role": "admin", "X-Forwarded-For": "203.0.113.7", "X-CSRF-Token": CSRF}
    direct = client.post("/api/v1/rulebooks/reload", headers=admin, environ_base={"REMOTE_ADDR": "192.0.2.50"})
    assert direct.status_code == 401
    proxied = client.post("/api/v1/rulebooks/reload", headers=admin, environ_base={"REMOTE_ADDR": PROXY})
    assert proxied.status_code == 200
    with core.database.session(readonly=True) as session:
        rows = [r for r in audit.iter_audit(session, AuditFilter()) if r.action == "rulebook.reload"]
    assert [(r.actor, r.source_ip) for r in rows] == [("carol", "203.0.113.7")]


@pytest.mark.parametrize("setting", ["10.0.0.300", "10.0.0.0/33", "proxy.local"])
def test_a_bad_trusted_proxies_setting_names_the_setting_and_the_entry(setting):
    with pytest.raises(ConfigError, match=rf"setting 'trusted_proxies': '{setting}' is not an IP address"):
        trusted_networks(f"127.0.0.1, {setting}")
