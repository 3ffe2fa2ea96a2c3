"""`gpuslo slo export`: the Prometheus rules pass the real `promtool check rules` (Debian's prometheus package)
and, fed series in `promtool test rules`, page when the error ratio burns the budget and stay quiet when it does
not; the OpenSLO documents carry the SLO, its indicator, window, target and burn-rate alert policies."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpuslo.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install prometheus "
                                                              "(scripts/install.sh installs it)")


def _export(fmt: str, tmp_path: Path) -> Path:
    out = tmp_path / f"slos.{fmt}.yaml"
    result = CliRunner().invoke(main, ["slo", "export", "--format", fmt, "--rules", str(ROOT / "rules"),
                                       "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out


@needs_promtool
def test_prometheus_rules_pass_promtool_check(tmp_path):
    rules = _export("prometheus", tmp_path)
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout


def _series(good_per_min: int, bad_per_min: int, minutes: int) -> list[dict[str, str]]:
    base = 'gpuslo_slo_events_total{slo="token-latency",good="%s"}'
    return [{"series": base % "true", "values": f"0+{good_per_min}x{minutes}"},
            {"series": base % "false", "values": f"0+{bad_per_min}x{minutes}"}]


@needs_promtool
def test_exported_burn_alerts_fire_in_prometheus_as_the_policy_says(tmp_path):
    rules = _export("prometheus", tmp_path)
    groups = yaml.safe_load(rules.read_text())["groups"]
    alerts = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    page, ticket = alerts["GpusloSloBurnTokenLatencyPage"], alerts["GpusloSloBurnTokenLatencyTicket"]

    def expected(rule):
        return [{"exp_labels": {**rule["labels"]}, "exp_annotations": rule["annotations"]}]

    tests = {
        "rule_files": [str(rules)], "evaluation_interval": "1m",
        "tests": [
            # 10 % bad: 10x the 1 % budget: above 6x over 6 h and 30 m (page), above 1x (ticket); not 14.4x.
            {"interval": "1m", "input_series": _series(90, 10, 120),
             "alert_rule_test": [{"eval_time": "90m", "alertname": page["alert"], "exp_alerts": expected(page)},
                                 {"eval_time": "90m", "alertname": ticket["alert"],
                                  "exp_alerts": expected(ticket)}]},
            # 0.5 % bad: half the budget's rate: nothing fires.
            {"interval": "1m", "input_series": _series(995, 5, 120),
             "alert_rule_test": [{"eval_time": "90m", "alertname": page["alert"], "exp_alerts": []},
                                 {"eval_time": "90m", "alertname": ticket["alert"], "exp_alerts": []}]},
        ]}
    test_file = tmp_path / "slo.test.yaml"
    test_file.write_text(yaml.safe_dump(tests))
    run = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_openslo_documents(tmp_path):
    docs = list(yaml.safe_load_all(_export("openslo", tmp_path).read_text()))
    slos = {d["metadata"]["name"]: d for d in docs if d["kind"] == "SLO"}
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "AlertPolicy"}
    assert set(slos) == {"token-latency", "first-token-latency", "stream-success", "training-progress"}
    assert slos["training-progress"]["spec"]["timeWindow"] == [{"duration": "7d", "isRolling": True}]
    assert all(d["apiVersion"] == "openslo/v1" for d in docs)
    itl = slos["token-latency"]["spec"]
    assert itl["objectives"] == [{"displayName": "p99 inter-token latency < 200 ms", "target": 0.99}]
    assert itl["timeWindow"] == [{"duration": "28d", "isRolling": True}]
    assert itl["budgetingMethod"] == "Occurrences"
    ratio = itl["indicator"]["spec"]["ratioMetric"]
    good = 'sum(gpuslo_slo_events_total{slo="token-latency",good="true"})'
    assert ratio["good"]["metricSource"]["spec"]["query"] == good
    page = policies["token-latency-burn-page"]["spec"]["conditions"]
    assert [c["spec"]["condition"] for c in page] == [
        {"kind": "burnrate", "op": "gte", "threshold": 14.4, "lookbackWindow": "1h", "alertAfter": "5m"},
        {"kind": "burnrate", "op": "gte", "threshold": 6.0, "lookbackWindow": "6h", "alertAfter": "30m"}]
    assert set(itl["alertPolicies"]) <= set(policies)
