"""alerts.yaml loading (file:line errors, secret references) and the routing decisions it drives."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from gpuslo.engine.alerts import load_alerts_config, load_alerts_text
from gpuslo.engine.alerts.routing import RateLimit, TokenBuckets, inhibited_by, route
from gpuslo.engine.errors import ConfigError

HOOK_SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()
ENV = {"PD_KEY": "pd-routing-key-value", "SLACK_URL": "http://127.0.0.1:9/services/x", "HOOK": HOOK_SECRET}

CONFIG = """\
receivers:
  - {name: pd, type: pagerduty, allow_private_network: true, allow_http: true, routing_key: "env:PD_KEY",
     url: "http://127.0.0.1:9/v2/enqueue",
     rate_limit: {per_minute: 60, burst: 2}}
  - {name: slack, type: slack, allow_private_network: true, allow_http: true, url: "env:SLACK_URL"}
  - {name: hook, type: webhook, allow_private_network: true, allow_http: true, url: "http://127.0.0.1:9/hook",
     secret: "env:HOOK", format: alertmanager}
routes:
  - name: critical-serving
    match: {severity: [critical, error], labels: {team: serving}}
    receivers: [pd, slack]
    group_wait: 30s
    repeat_interval: 1h
    continue: true
  - name: everything
    receivers: [hook, slack]
    send_resolved: false
inhibit:
  - source: {rule: gpu-xid-79}
    target: {rule: [token-stall, itl-regression]}
    equal: [host, gpu]
"""


def subject(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {"violation_id": 1, "severity": "critical", "slo": "availability", "rule": "oom",
                               "host": "node-a", "gpu": 0, "labels": {"team": "serving"}}
    return {**base, **changes}


def test_loads_receivers_routes_inhibition_and_limits() -> None:
    config = load_alerts_text(CONFIG, "alerts.yaml", ENV)
    assert sorted(config.receivers) == ["hook", "pd", "slack"]
    first, second = config.routes
    assert (first.group_wait, first.repeat_interval, first.proceed) == (30.0, 3600.0, True)
    assert second.send_resolved is False and second.matcher.fields == {}
    assert config.rate_limits["pd"] == RateLimit(1.0, 2)
    assert config.inhibit[0].equal == ("host", "gpu")


def test_secret_values_never_appear_in_the_config_repr() -> None:
    config = load_alerts_text(CONFIG, "alerts.yaml", ENV)
    text = repr(config) + str(config)
    for value in ENV.values():
        assert value not in text
    assert "env:PD_KEY" in text


def test_routing_first_match_continue_and_each_receiver_once() -> None:
    config = load_alerts_text(CONFIG, "alerts.yaml", ENV)
    assert [(t.receiver, t.route.name) for t in route(config, subject())] == [
        ("pd", "critical-serving"), ("slack", "critical-serving"), ("hook", "everything")]
    assert [t.receiver for t in route(config, subject(severity="warning"))] == ["hook", "slack"]
    assert [t.receiver for t in route(config, subject(labels={"team": "training"}))] == ["hook", "slack"]


def test_inhibition_mutes_token_stalls_on_the_same_gpu_only() -> None:
    config = load_alerts_text(CONFIG, "alerts.yaml", ENV)
    xid = subject(violation_id=9, rule="gpu-xid-79")
    stall = subject(violation_id=10, rule="token-stall")
    assert "violation 9" in (inhibited_by(config.inhibit, stall, [xid]) or "")
    assert inhibited_by(config.inhibit, subject(violation_id=10, rule="token-stall", gpu=1), [xid]) is None
    assert inhibited_by(config.inhibit, subject(violation_id=10, rule="oom"), [xid]) is None
    assert inhibited_by(config.inhibit, stall, []) is None


def test_token_bucket_allows_a_burst_then_paces() -> None:
    buckets = TokenBuckets({"pd": RateLimit(per_second=2.0, burst=2)})
    assert buckets.take("pd", 100.0) == 0.0 and buckets.take("pd", 100.0) == 0.0
    assert buckets.take("pd", 100.0) == pytest.approx(0.5)
    assert buckets.take("pd", 100.5) == 0.0
    assert buckets.take("other", 100.0) == 0.0


@pytest.mark.parametrize(("text", "expected"), [
    ("receivers:\n  - {name: pd, type: pagerduty, routing_key: plain-key}\n", "alerts.yaml:2:46: secrets must be"),
    ("receivers:\n  - {name: pd, type: pagerduty, routing_key: 'env:NOPE'}\n",
     "alerts.yaml:2:46: environment variable NOPE is not set"),
    ("receivers:\n  - {name: s, type: slack, url: 'http://hooks/x'}\n", "alerts.yaml:2:33: a Slack webhook URL"),
    ("routes:\n  - receivers: [ghost]\n", "alerts.yaml:2:17: unknown receiver 'ghost'"),
    ("routes:\n  - {receivers: [], group_wiat: 5s}\n", "alerts.yaml:2:21: route: unknown field 'group_wiat'"),
    ("routes:\n  - {receivers: [], match: {severity: loud}}\n", "alerts.yaml:2:39: severity must be among"),
    ("routes:\n  - {receivers: [], repeat_interval: soon}\n", "alerts.yaml:2:38: 'soon' is not a duration"),
    ("receivers:\n  - {name: h, type: webhook, url: 'ftp://x', secret: 'env:HOOK'}\n",
     "alerts.yaml:2:35: receiver \"h\": url ftp://x: scheme 'ftp' is not allowed: url must start with https://"),
    ("receivers:\n  - {name: h, type: carrier-pigeon}\n", "alerts.yaml:2:21: receiver type must be"),
    ("receivers: [\n", "alerts.yaml:2:1: YAML syntax error"),
])
def test_errors_name_file_line_and_column(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_alerts_text(text, "alerts.yaml", ENV)
    assert expected in str(caught.value)
    for value in ENV.values():
        assert value not in str(caught.value)


def test_secrets_from_files_and_a_malformed_webhook_secret(tmp_path: Path) -> None:
    key_file = tmp_path / "og.key"
    key_file.write_text("genie-from-file\n")
    path = tmp_path / "alerts.yaml"
    path.write_text(f"receivers:\n  - {{name: og, type: opsgenie, api_key: 'file:{key_file}'}}\n"
                    "  - {name: h, type: webhook, allow_private_network: true, allow_http: true,\n"
                    "     url: 'http://127.0.0.1:9', secret: 'env:BAD'}\n")
    with pytest.raises(ConfigError, match=r"alerts.yaml:4:.*env:BAD: a webhook secret must be 'whsec_'"):
        load_alerts_config(path, {"BAD": "whsec_not base64!"})
    path.write_text(f"receivers:\n  - {{name: og, type: opsgenie, api_key: 'file:{key_file}'}}\n")
    config = load_alerts_config(path, {})
    assert config.receivers["og"].api_key.value == "genie-from-file"  # type: ignore[attr-defined]
