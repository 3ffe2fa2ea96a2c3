"""Receiver URLs aimed at loopback, link-local, private or reserved addresses, or at non-HTTP schemes, are refused
when alerts.yaml is loaded and again when a notification is sent, unless the receiver explicitly allows it."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Sequence

import pytest

from gpuslo.engine.alerts import DeliveryPolicy, DeliveryWorker, enqueue_for_match, load_alerts_text, send_test
from gpuslo.engine.alerts.egress import TargetPolicy
from gpuslo.engine.alerts.routing import AlertsConfig, Matcher, Route
from gpuslo.engine.alerts.webhook import WebhookReceiver
from gpuslo.engine.errors import ConfigError
from gpuslo.engine.store import outbox

HINT = "(set allow_private_network: true on this receiver to allow it)"
PUBLIC = "93.184.216.34"  # a global unicast address; nothing here ever connects to it
POLICY = DeliveryPolicy(timeout_s=0.3, per_receiver=5, lease_s=5.0, base_delay_s=1.0, max_delay_s=60.0, max_attempts=4)


def answers(table: dict[str, Sequence[str]]) -> Callable[[str, int], list[str]]:
    """A resolver hook: the addresses of each name from `table`; names not in it do not resolve."""

    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(table[host])

    return resolve


def hook_config(url: str, extra: str = "") -> str:
    return f"receivers:\n  - name: hook\n    type: webhook\n    url: {url}\n{extra}routes:\n  - receivers: [hook]\n"


def load_error(text: str, resolver: Callable[[str, int], list[str]] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_alerts_text(text, "alerts.yaml", {}, resolver=resolver or answers({}))
    return str(caught.value)


@pytest.mark.parametrize(("host", "address", "kind"), [
    ("127.0.0.1", "127.0.0.1", "a loopback address"),
    ("127.8.9.10", "127.8.9.10", "a loopback address"),
    ("169.254.169.254", "169.254.169.254", "a link-local address"),  # cloud metadata
    ("10.0.0.5", "10.0.0.5", "a private address"),
    ("172.16.3.4", "172.16.3.4", "a private address"),
    ("192.168.1.1", "192.168.1.1", "a private address"),
    ("0.0.0.0", "0.0.0.0", "an unspecified address"),
    ("224.0.0.1", "224.0.0.1", "a multicast address"),
    ("240.0.0.1", "240.0.0.1", "a reserved address"),
    ("100.64.0.1", "100.64.0.1", "a non-public address"),  # carrier-grade NAT space
    ("[::1]", "::1", "a loopback address"),
    ("[fe80::1]", "fe80::1", "a link-local address"),
    ("[fc00::7]", "fc00::7", "a private address"),
    ("[fd12:3456::1]", "fd12:3456::1", "a private address"),
    ("[::]", "::", "an unspecified address"),
    ("[ff02::1]", "ff02::1", "a multicast address"),
    ("[::ffff:127.0.0.1]", "::ffff:127.0.0.1", "a loopback address (IPv4 127.0.0.1)"),
    ("[::ffff:169.254.169.254]", "::ffff:169.254.169.254", "a link-local address (IPv4 169.254.169.254)"),
    ("[::ffff:10.1.2.3]", "::ffff:10.1.2.3", "a private address (IPv4 10.1.2.3)"),
    ("[2002:a00:1::]", "2002:a00:1::", "a private address (IPv4 10.0.0.1)"),  # 6to4 wrapping 10.0.0.1
])
def test_each_forbidden_address_class_is_refused_at_load_with_its_location(host, address, kind) -> None:
    url = f"https://{host}:9/x"
    assert load_error(hook_config(url)) == (
        f'alerts.yaml:4:10: receiver "hook": url {url} resolves to {address}, {kind} {HINT}')


@pytest.mark.parametrize("host", [PUBLIC, "[2606:4700::6810:84e5]", f"[::ffff:{PUBLIC}]"])
def test_public_addresses_load(host: str) -> None:
    config = load_alerts_text(hook_config(f"https://{host}/x"), "alerts.yaml", {}, resolver=answers({}))
    assert config.target_policy("hook") == TargetPolicy() and not config.warnings


def test_plain_http_to_loopback_names_both_problems_on_their_own_lines() -> None:
    assert load_error(hook_config("http://127.0.0.1:9/x")).splitlines() == [
        'alerts.yaml:4:10: receiver "hook": url http://127.0.0.1:9/x uses plain http '
        "(set allow_http: true on this receiver to allow it)",
        f'alerts.yaml:4:10: receiver "hook": url http://127.0.0.1:9/x resolves to 127.0.0.1, a loopback address {HINT}',
    ]


def test_names_are_resolved_at_load_and_any_forbidden_answer_refuses_them() -> None:
    resolver = answers({"hooks.example": [PUBLIC, "10.0.0.7"], "ok.example": [PUBLIC]})
    assert load_error(hook_config("https://hooks.example/x"), resolver) == (
        'alerts.yaml:4:10: receiver "hook": url https://hooks.example/x resolves to 10.0.0.7, a private address '
        + HINT)
    config = load_alerts_text(hook_config("https://ok.example/x"), "alerts.yaml", {}, resolver=resolver)
    assert config.target_policy("hook") == TargetPolicy() and not config.warnings


@pytest.mark.parametrize("host", ["localhost", "2130706433"])  # 2130706433 is 127.0.0.1 written as one number
def test_the_system_resolver_refuses_names_of_loopback(host: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_alerts_text(hook_config(f"https://{host}:9/x"), "alerts.yaml", {})  # the real getaddrinfo
    message = str(caught.value)
    assert re.fullmatch(rf'alerts.yaml:4:10: receiver "hook": url https://{host}:9/x resolves to '
                        rf"(127\.0\.0\.1|::1), a loopback address {re.escape(HINT)}", message), message


@pytest.mark.parametrize(("receiver", "url", "scheme"), [
    ("{name: pd, type: pagerduty, routing_key: 'env:KEY', url: '%s'}", "file:///etc/passwd", "file"),
    ("{name: pd, type: pagerduty, routing_key: 'env:KEY', url: '%s'}", "ftp://files.example/x", "ftp"),
    ("{name: og, type: opsgenie, api_key: 'env:KEY', url: '%s'}", "gopher://127.0.0.1:6379/_FLUSHALL", "gopher"),
    ("{name: h, type: webhook, url: '%s'}", "gopher://127.0.0.1:11211/_stats", "gopher"),
    ("{name: h, type: webhook, url: '%s', allow_private_network: true, allow_http: true}", "ftp://10.0.0.1/",
     "ftp"),
])
def test_non_http_schemes_are_refused_even_when_allowed(receiver: str, url: str, scheme: str) -> None:
    text = "receivers:\n  - " + receiver % url + "\n"
    with pytest.raises(ConfigError) as caught:
        load_alerts_text(text, "alerts.yaml", {"KEY": "k"}, resolver=answers({}))
    assert f"url {url}: scheme '{scheme}' is not allowed: url must start with https://" in str(caught.value)


def test_a_secret_url_is_vetted_but_named_by_its_reference_only() -> None:
    secret_url = "https://10.9.8.7/services/T0/B0/very-secret-token"
    text = "receivers:\n  - {name: slack, type: slack, url: 'env:SLACK_URL'}\n"
    with pytest.raises(ConfigError) as caught:
        load_alerts_text(text, "alerts.yaml", {"SLACK_URL": secret_url}, resolver=answers({}))
    assert str(caught.value) == (
        f'alerts.yaml:2:37: receiver "slack": url env:SLACK_URL resolves to 10.9.8.7, a private address {HINT}')
    gopher = "gopher://127.0.0.1:6379/_secret"
    with pytest.raises(ConfigError) as caught:
        load_alerts_text(text, "alerts.yaml", {"SLACK_URL": gopher}, resolver=answers({}))
    assert "url env:SLACK_URL: scheme 'gopher' is not allowed" in str(caught.value)
    assert "_secret" not in str(caught.value)


def test_the_allowances_each_lift_exactly_their_own_check() -> None:
    private = hook_config("http://127.0.0.1:9/x", "    allow_private_network: true\n    allow_http: true\n")
    config = load_alerts_text(private, "alerts.yaml", {}, resolver=answers({}))
    assert config.target_policy("hook") == TargetPolicy(allow_private_network=True, allow_http=True)
    https_private = hook_config("https://127.0.0.1:9/x", "    allow_private_network: true\n")
    assert load_alerts_text(https_private, "alerts.yaml", {}, resolver=answers({})).target_policy("hook") == \
        TargetPolicy(allow_private_network=True)
    public_http = hook_config(f"http://{PUBLIC}/x", "    allow_http: true\n")
    assert load_alerts_text(public_http, "alerts.yaml", {}, resolver=answers({})).target_policy("hook") == \
        TargetPolicy(allow_http=True)
    assert load_error(hook_config("http://127.0.0.1:9/x", "    allow_http: true\n")) == (
        f'alerts.yaml:4:10: receiver "hook": url http://127.0.0.1:9/x resolves to 127.0.0.1, a loopback address {HINT}')
    assert load_error(hook_config("https://127.0.0.1:9/x", "    allow_private_network: 'yes'\n")).splitlines()[0] \
        == "alerts.yaml:5:28: allow_private_network must be true or false"


def test_a_name_that_does_not_resolve_at_load_is_a_located_warning(caplog) -> None:
    config = load_alerts_text(hook_config("https://hooks.example/x"), "alerts.yaml", {}, resolver=answers({}))
    assert config.warnings == (
        'alerts.yaml:4:10: receiver "hook": url https://hooks.example/x: its host does not resolve now '
        "(Name or service not known); its addresses are checked again before every send",)
    assert config.warnings[0] in caplog.text


# ---- send time --------------------------------------------------------------------------------------------


def rebinding_config(port: int, extra: str = "") -> AlertsConfig:
    """hooks.example is public when the file is loaded (the DNS answer changes later, in each test)."""
    text = hook_config(f"http://hooks.example:{port}/hook", "    allow_http: true\n" + extra)
    return load_alerts_text(text, "alerts.yaml", {}, resolver=answers({"hooks.example": [PUBLIC]}))


@pytest.mark.parametrize("rebound", ["127.0.0.1", "::ffff:127.0.0.1"])
def test_a_name_rebound_to_loopback_after_load_is_refused_at_send_and_dead_lettered(
        database, record, clock, receiver_server, rebound: str) -> None:
    server = receiver_server()
    config = rebinding_config(server.server.server_address[1])
    record(database, enqueue=lambda s, v: enqueue_for_match(s, v, config=config, public_url="https://g.example",
                                                            now=clock()))
    worker = DeliveryWorker(database, config, POLICY, clock=clock,
                            resolver=answers({"hooks.example": [rebound]}))
    try:
        assert worker.run_once() == 1
    finally:
        worker.close()
    with database.session(readonly=True) as session:
        (row,) = outbox.list_notifications(session)
        (attempt,) = outbox.list_attempts(session, [row.id])
    assert row.status == "dead" and attempt.status == "dead" and attempt.response_code is None
    assert attempt.error == (f"refused to connect: hooks.example resolves to {rebound}, a loopback address"
                             f"{' (IPv4 127.0.0.1)' if rebound != '127.0.0.1' else ''} {HINT}")
    assert server.requests == []  # nothing reached the receiver listening on 127.0.0.1


def test_an_allowed_receiver_connects_to_the_address_it_resolved_once_keeping_the_host_header(
        receiver_server) -> None:
    server = receiver_server()
    port = server.server.server_address[1]
    config = rebinding_config(port, "    allow_private_network: true\n")
    calls: list[str] = []

    def resolver(host: str, _port: int) -> list[str]:
        # The first answer is the receiver; a second look-up (which must not happen) would get a dead address.
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["192.0.2.1"]

    (result,) = send_test(config, public_url="https://g.example", timeout_s=2, resolve=False, resolver=resolver)
    # hooks.example exists in no real DNS: the request arrived because the socket went to the looked-up answer,
    # and the single look-up shows nothing resolved the name a second time between check and connect.
    assert result.status == "delivered" and calls == ["hooks.example"]
    assert [r.headers["host"] for r in server.requests] == [f"hooks.example:{port}"]


def test_send_test_refuses_a_rebound_name_too(receiver_server) -> None:
    server = receiver_server()
    config = rebinding_config(server.server.server_address[1])
    (result,) = send_test(config, public_url="https://g.example", timeout_s=2, resolve=False,
                          resolver=answers({"hooks.example": ["169.254.169.254"]}))
    assert result.status == "dead" and "169.254.169.254, a link-local address" in (result.error or "")
    assert server.requests == []


def test_a_name_that_does_not_resolve_at_send_is_retried_not_dead(receiver_server) -> None:
    server = receiver_server()
    config = rebinding_config(server.server.server_address[1])
    (result,) = send_test(config, public_url="https://g.example", timeout_s=2, resolve=False, resolver=answers({}))
    assert result.status == "retry" and "cannot resolve hooks.example" in (result.error or "")


def test_a_config_built_without_the_loader_gets_the_strict_policy_at_send(receiver_server) -> None:
    server = receiver_server()
    hook = WebhookReceiver("hook", f"{server.url}/hook")
    config = AlertsConfig({"hook": hook}, (Route("all", Matcher(), ("hook",)),))
    (result,) = send_test(config, public_url="https://g.example", timeout_s=2, resolve=False)
    assert result.status == "dead"
    assert result.error == ("refused to send: scheme 'http' is not allowed "
                            "(set allow_http: true on this receiver to allow it)")
    https = AlertsConfig({"hook": WebhookReceiver("hook", f"https://127.0.0.1:{server.server.server_address[1]}/h")},
                         (Route("all", Matcher(), ("hook",)),))
    (result,) = send_test(https, public_url="https://g.example", timeout_s=2, resolve=False)
    assert result.status == "dead" and f"127.0.0.1 resolves to 127.0.0.1, a loopback address {HINT}" in result.error
    assert server.requests == []


def test_redirects_to_metadata_are_not_followed(receiver_server) -> None:
    server = receiver_server()
    server.script.append(("status", 302, {"Location": "http://169.254.169.254/latest/meta-data/"}))
    config = load_alerts_text(hook_config(f"{server.url}/hook", "    allow_private_network: true\n"
                                          "    allow_http: true\n"), "alerts.yaml", {}, resolver=answers({}))
    (result,) = send_test(config, public_url="https://g.example", timeout_s=2, resolve=False)
    assert (result.status, result.response_code, len(server.requests)) == ("dead", 302, 1)
