"""End to end on both databases: a match writes its trigger with the violation; a human resolve its resolve."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.store import outbox

LOCAL = "allow_private_network: true, allow_http: true"  # the receivers here listen on 127.0.0.1

FRAG = {"kind": "mem_fragmentation", "time": "2026-11-29T12:00:00Z", "host": "node-7", "gpu": 3,
        "attrs": {"fragmentation_ratio": 0.71, "free_bytes": 1000, "largest_free_bytes": 290}}


def test_matches_and_resolves_flow_through_the_outbox_to_the_receiver(database, tmp_path: Path, receiver_server):
    server = receiver_server()
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(Path("rules/memory.yaml"), rules / "memory.yaml")
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(f'receivers:\n  - {{name: hook, type: webhook, {LOCAL}, url: "{server.url}/hook"}}\n'
                      'routes:\n  - {receivers: [hook]}\n')
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=rules, alerts_config=alerts,
                                public_url="https://gpuslo.example"))
    try:
        assert core.scheduler.get_job("alerts-delivery") is not None
        core.ingest([{**FRAG, "id": f"frag-{i}", "time": f"2026-11-29T12:00:0{i}Z"} for i in range(3)])
        assert core.wait_idle()
        with database.session(readonly=True) as session:
            triggers = outbox.list_notifications(session)
        assert triggers and {n.action for n in triggers} == {"trigger"}
        violation_id = triggers[0].violation_id
        core.lifecycle.resolve(violation_id, actor="alice")
        core.delivery.run_until_idle(timeout_s=10)  # the scheduler may have sent some already
    finally:
        core.close()
    with database.session(readonly=True) as session:
        rows = outbox.list_notifications(session, violation_id=violation_id)
    assert [(n.action, n.status) for n in rows][-1] == ("resolve", "delivered")
    sent = [r.json() for r in server.requests if r.json()["data"]["violation_id"] == violation_id]
    assert [s["type"] for s in sent][0] == "violation.trigger" and sent[-1]["type"] == "violation.resolve"
    assert sent[0]["data"]["url"] == f"https://gpuslo.example/violations/{violation_id}"
