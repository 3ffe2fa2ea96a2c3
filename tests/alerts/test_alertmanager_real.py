"""The alertmanager receiver against a real Alertmanager (Debian's prometheus-alertmanager) on a loopback port:
the violation's alert appears in its API, is re-sent while firing, resolves, and reaches a receiver behind it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuslo.engine.config import Settings
from gpuslo.engine.service import Gpuslo
from gpuslo.engine.store import outbox

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
LOCAL = "allow_private_network: true, allow_http: true"
FRAG = {"kind": "mem_fragmentation", "host": "node-7", "gpu": 3,
        "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 2 * 2**30, "largest_free_bytes": 290 * 2**20}}

pytestmark = pytest.mark.skipif(ALERTMANAGER is None, reason="needs Debian's prometheus-alertmanager "
                                "(scripts/install.sh installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def alertmanager(tmp_path: Path, receiver_server: Any) -> Iterator[tuple[str, Any]]:
    """A real Alertmanager routing everything at once to a scripted webhook receiver; (its URL, the receiver)."""
    behind = receiver_server()
    port, cluster = _free_port(), _free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(
        "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n"
        "  repeat_interval: 1h\n"
        f"receivers:\n  - name: hook\n    webhook_configs:\n      - url: {behind.url}/am\n        send_resolved: true\n")
    log = (tmp_path / "alertmanager.log").open("wb")
    process = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
         f"--web.listen-address=127.0.0.1:{port}", f"--cluster.listen-address=127.0.0.1:{cluster}",
         "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("alertmanager did not start: "
                                   + (tmp_path / "alertmanager.log").read_text()[-2000:])
            time.sleep(0.1)
        yield url, behind
    finally:
        process.terminate()
        process.wait(10)
        log.close()


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


def test_violation_fires_resends_and_resolves_in_a_real_alertmanager(database, tmp_path: Path, alertmanager) -> None:
    url, behind = alertmanager
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

        core.resolve(violation_id, actor="alice")
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
