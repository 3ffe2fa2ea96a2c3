"""kill -9 the delivery worker mid-delivery: after a restart every notification arrives, none as a new incident."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuslo.engine.alerts import enqueue_for_match, load_alerts_config
from gpuslo.engine.store import outbox

LOCAL = "allow_private_network: true, allow_http: true"  # the receivers here listen on 127.0.0.1

SECRET = "whsec_" + base64.b64encode(b"crash-test-key").decode()
WORKER = Path(__file__).with_name("crash_worker.py")
COUNT = 5
TIMEOUT_S, LEASE_S = 1.5, 4.6  # the kill lands well within the timeout; the restart waits out the lease


def start_worker(database_url: str, config_path: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, str(WORKER), database_url, str(config_path), str(TIMEOUT_S), str(LEASE_S)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "HOOK": SECRET})
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def statuses(database) -> dict[int, str]:
    with database.session(readonly=True) as session:
        return {n.id: n.status for n in outbox.list_notifications(session)}


def test_kill_9_mid_delivery_then_restart_delivers_everything_once_per_incident(
        database, record, clock, receiver_server, tmp_path, verify_standard_webhook):
    server = receiver_server()
    server.script.extend([("status", 200), ("status", 200), ("hang", 60)])  # the third send never answers
    config_path = tmp_path / "alerts.yaml"
    config_path.write_text(f'receivers:\n  - {{name: hook, type: webhook, {LOCAL}, url: "{server.url}/hook", '
                           f'secret: "env:HOOK"}}\nroutes:\n  - {{receivers: [hook]}}\n')
    config = load_alerts_config(config_path, {"HOOK": SECRET})
    for i in range(COUNT):
        record(database, group_key=f"g{i}", enqueue=lambda s, v: enqueue_for_match(
            s, v, config=config, public_url="https://gpuslo.example", now=clock()))
    ids = sorted(statuses(database))
    first = start_worker(database.url, config_path)
    try:
        server.wait_for(3, timeout=20)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
        first.stdout.close()  # type: ignore[union-attr]
    at_kill = statuses(database)
    assert list(at_kill.values()).count("delivering") == 1, at_kill  # killed between send and record
    assert list(at_kill.values()).count("delivered") == 2

    second = start_worker(database.url, config_path)
    try:
        deadline = time.monotonic() + 30
        while set(statuses(database).values()) != {"delivered"} and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        second.terminate()
        second.wait(timeout=10)
        second.stdout.close()  # type: ignore[union-attr]
    assert set(statuses(database).values()) == {"delivered"}

    received = server.requests
    by_id: dict[str, set[str]] = {}
    for request in received:
        assert verify_standard_webhook([SECRET], request.headers, request.body)
        by_id.setdefault(request.headers["webhook-id"], set()).add(request.json()["data"]["dedup_key"])
    assert sorted(by_id) == sorted(f"msg_gpuslo_{i}" for i in ids)  # every notification arrived
    assert all(len(keys) == 1 for keys in by_id.values())  # a redelivery carries the same incident key
    assert len({key for keys in by_id.values() for key in keys}) == COUNT  # one incident per violation
    assert len(received) == COUNT + 1  # exactly the interrupted one was sent twice
