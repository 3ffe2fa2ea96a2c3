"""`gpuslo alerts test`: a test notification through one route, and what each receiver got."""

from __future__ import annotations

import pytest

from gpuslo.engine.alerts import load_alerts_text, send_test
from gpuslo.engine.errors import ConfigError

LOCAL = "allow_private_network: true, allow_http: true"  # the receivers here listen on 127.0.0.1


def test_send_test_reports_what_each_receiver_got_without_secrets(receiver_server, refused_url) -> None:
    server = receiver_server()
    server.script.extend([("status", 202), ("status", 202), ("status", 500, {}, "boom")])
    text = (f'receivers:\n  - {{name: pd, type: pagerduty, {LOCAL}, routing_key: "env:PD",\n'
            f'     url: "{server.url}/v2/enqueue"}}\n'
            f'  - {{name: og, type: opsgenie, {LOCAL}, api_key: "env:OG", url: "{server.url}"}}\n'
            f'  - {{name: down, type: webhook, {LOCAL}, url: "{refused_url}/hook"}}\n'
            'routes:\n  - {name: gpu-critical, match: {severity: critical, slo: availability}, receivers: [pd, og]}\n'
            '  - {name: other, receivers: [down]}\n')
    config = load_alerts_text(text, "alerts.yaml", {"PD": "pd-key-secret", "OG": "og-key-secret"})
    results = send_test(config, route_name="gpu-critical", public_url="https://gpuslo.example", timeout_s=2)
    assert [(r.receiver, r.action, r.status, r.response_code) for r in results] == [
        ("pd", "trigger", "delivered", 202), ("pd", "resolve", "delivered", 202),
        ("og", "trigger", "retry", 500), ("og", "resolve", "delivered", 200)]
    sent = server.requests[0].json()
    assert sent["payload"]["severity"] == "critical" and sent["payload"]["group"] == "availability"
    assert sent["dedup_key"].startswith("gpuslo-test-") and sent["routing_key"] == "pd-key-secret"
    assert server.requests[2].headers["authorization"] == "GenieKey og-key-secret"
    assert server.requests[2].json()["priority"] == "P5"
    shown = repr(results) + "".join(r.describe() for r in results)
    assert "pd-key-secret" not in shown and "og-key-secret" not in shown and "***" in shown
    assert "boom" in results[2].error and "og (opsgenie) trigger: retry HTTP 500" in results[2].describe()

    (down,) = send_test(config, route_name="other", public_url="https://gpuslo.example", timeout_s=2, resolve=False)
    assert down.status == "retry" and "ConnectError" in down.error


def test_send_test_names_the_known_routes_when_one_is_missing() -> None:
    config = load_alerts_text("routes:\n  - {name: a, receivers: []}\n", "alerts.yaml", {})
    with pytest.raises(ConfigError, match=r"no route named 'b' \(routes: a\)"):
        send_test(config, route_name="b", public_url="http://x")
