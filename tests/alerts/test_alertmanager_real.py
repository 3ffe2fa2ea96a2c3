"""The alertmanager receiver against a real Alertmanager (Debian's prometheus-alertmanager) on a loopback port:
the violation's alert appears in its API, is re-sent while firing, resolves, and reaches a receiver behind it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx
from alertmanager_support import ALERTMANAGER_NEEDED

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.store import outbox

LOCAL = "allow_private_network: true, allow_http: true"
FRAG = {"kind": "mem_fragmentation", "host": "node-7", "gpu": 3,
        "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 2 * 2**30, "largest_free_bytes": 290 * 2**20}}

pytestmark = ALERTMANAGER_NEEDED


def _alerts(url: str, **params: str) -> list[dict[str, Any]]:
    return httpx.get(f"{url}/api/v2/alerts", params=params, timeout=5).json()


def _wait(predicate: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_violation_fires_resends_and_resolves_in_a_real_alertmanager(database, tmp_path: Path, alertmanager,
                                                                     receiver_server) -> None:
    behind = receiver_server()
    url = alertmanager(f"{behind.url}/am")
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(Path("rules/memory.yaml"), rules / "memory.yaml")
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(f'receivers:\n  - {{name: am, type: alertmanager, {LOCAL}, url: "{url}", '
                      'resend_interval: 2s}\nroutes:\n  - {receivers: [am]}\n')
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, alerts_config=alerts,
                                public_url="https://gpuslo.example"))
    try:
        now = time.time()
        core.ingest([{**FRAG, "id": f"frag-{i}", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                          time.gmtime(now - 5 + i))}
                     for i in range(3)])
        assert core.wait_idle()
        core.delivery.run_until_idle(timeout_s=10)
        with database.session(readonly=True) as session:
            triggers = outbox.list_notifications(session)
        assert triggers and all(n.status == "delivered" for n in triggers), triggers
        violation_id = triggers[0].violation_id
        firing = _wait(lambda: [a for a in _alerts(url) if a["labels"].get("gpuslo_violation") == str(violation_id)])
        (alert,) = firing
        assert alert["status"]["state"] == "active"
        assert alert["labels"]["alertname"] == "fragmentation-high" and alert["labels"]["host"] == "node-7"
        assert alert["labels"]["gpu"] == "3" and alert["generatorURL"].endswith(f"/violations/{violation_id}")
        first_end = alert["endsAt"]
        # Re-sent while firing: the resender moves endsAt forward (4 resend intervals from each send).
        time.sleep(1.1)
        assert core.resender.run_once() == {"am": 1}
        assert _wait(lambda: [a for a in _alerts(url) if a["endsAt"] > first_end])
        # The receiver behind Alertmanager got the firing group.
        webhook = _wait(lambda: [r.json() for r in behind.requests if r.json()["status"] == "firing"])
        assert webhook[0]["alerts"][0]["labels"]["gpuslo_violation"] == str(violation_id)

        core.lifecycle.resolve(violation_id, actor="alice")
        core.delivery.run_until_idle(timeout_s=10)
        assert not [a for a in _alerts(url, active="true") if a["labels"].get("gpuslo_violation") == str(violation_id)]
        resolved = _wait(lambda: [r.json() for r in behind.requests if r.json()["status"] == "resolved"])
        assert resolved[0]["alerts"][0]["labels"]["gpuslo_violation"] == str(violation_id)
        assert core.resender.run_once() == {"am": 0}  # nothing firing any more: nothing re-sent
    finally:
        core.close()
    with database.session(readonly=True) as session:
        rows = outbox.list_notifications(session, violation_id=violation_id)
    assert [(n.action, n.status) for n in rows] == [("trigger", "delivered"), ("resolve", "delivered")]
