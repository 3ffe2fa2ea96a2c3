"""A receiver that answers 410 Gone, seen and re-enabled through a real `gpuslo` server: the notifications page,
the receivers API, /metrics, the audited re-enable from the API, the UI form and the CLI; SQLite and PostgreSQL.

The core runs delivery on its own scheduler with the real clock, as `gpuslo serve` does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
from click.testing import CliRunner
from werkzeug.serving import make_server

from gpuslo.cli.main import main
from gpuslo.engine.alerts import enqueue_for_match
from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.store import audit, credentials
from gpuslo.engine.store.audit import AuditFilter
from gpuslo.web import create_app

LOCAL = "allow_private_network: true, allow_http: true"


@contextmanager
def _server(database, tmp_path: Path, gone_url: str, healthy_url: str) -> Iterator[tuple[str, Gpuslo]]:
    alerts = tmp_path / "alerts.yaml"
    alerts.write_text(f'receivers:\n  - {{name: gone, type: webhook, {LOCAL}, url: "{gone_url}/hook"}}\n'
                      f'  - {{name: healthy, type: webhook, {LOCAL}, url: "{healthy_url}/hook"}}\n'
                      'routes:\n  - {receivers: [gone, healthy]}\n')
    rules = tmp_path / "rules"
    rules.mkdir()
    settings = Settings(database_url=database.url, rules_dir=rules, alerts_config=alerts)
    core = Gpuslo.open(settings)
    http = make_server("127.0.0.1", 0, create_app(settings, core=core), threaded=True)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{http.server_port}", core
    finally:
        http.shutdown()
        thread.join(timeout=10)
        core.close()


def _until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _gone_state(http: httpx.Client, token: str) -> dict:
    items = http.get("/api/v1/receivers", headers={"Authorization": f"Bearer {token}"}).json()["items"]
    return next(i for i in items if i["receiver"] == "gone")


def test_a_410_receiver_is_disabled_visibly_and_re_enabled_by_an_operator(database, record, receiver_server,
                                                                         tmp_path):
    gone, healthy = receiver_server(), receiver_server()
    gone.script.append(("status", 410))
    with _server(database, tmp_path, gone.url, healthy.url) as (url, core), httpx.Client(base_url=url) as http:
        with core.database.session() as session:
            _, ops = credentials.create_token(session, name="ops", scopes=["operate"], now=datetime.now(UTC))
        auth = {"Authorization": f"Bearer {ops}"}

        def notify(prefix: str, count: int) -> None:
            now = datetime.now(UTC)
            for i in range(count):
                record(database, group_key=f"{prefix}{i}", now=now, enqueue=lambda s, v: enqueue_for_match(
                    s, v, config=core.alerts, public_url=url, now=now))

        notify("a", 3)
        _until(lambda: len(healthy.requests) == 3 and _gone_state(http, ops)["disabled"])
        sent = len(gone.requests)  # the 410, and sends that were already under way beside it
        time.sleep(1.0)  # a few more dispatcher rounds: nothing more may go to the disabled receiver
        assert len(gone.requests) == sent
        state = _gone_state(http, ops)
        assert "410" in state["disabled_reason"] and state["pending"] >= 1 and state["last_failure_at"]
        page = http.get("/notifications", headers=auth).text
        assert 'id="receiver-gone"' in page and "receiver-disabled" in page and 'id="enable-gone"' in page
        assert 'class="receiver receiver-enabled" id="receiver-healthy"' in page
        metrics = http.get("/metrics", headers=auth).text
        assert 'gpuslo_receiver_disabled{receiver="gone"} 1.0' in metrics
        assert 'gpuslo_notification_deliveries_total{outcome="disabled",reason="http_410",receiver="gone"} 1.0' \
            in metrics
        assert 'gpuslo_notification_deliveries_total{outcome="delivered",reason="ok",receiver="healthy"} 3.0' \
            in metrics

        # The operator re-enables it from the API: the waiting notifications go out.
        enabled = http.post("/api/v1/receivers/gone/enable", headers=auth)
        assert enabled.status_code == 200 and enabled.json()["disabled"] is False
        assert http.post("/api/v1/receivers/gone/enable", headers=auth).status_code == 409
        assert http.post("/api/v1/receivers/nobody/enable", headers=auth).status_code == 404
        _until(lambda: _gone_state(http, ops)["pending"] == 0 and _gone_state(http, ops)["delivering"] == 0)

        # Gone again: re-enabled with the notifications page's button.
        gone.script.append(("status", 410))
        notify("b", 1)
        _until(lambda: _gone_state(http, ops)["disabled"])
        assert http.post("/notifications/receivers/gone/enable", headers=auth).status_code == 303
        _until(lambda: _gone_state(http, ops)["pending"] == 0 and not _gone_state(http, ops)["disabled"])

        # And again: re-enabled from the CLI, which the running server picks up.
        gone.script.append(("status", 410))
        notify("c", 1)
        _until(lambda: _gone_state(http, ops)["disabled"])
        result = CliRunner().invoke(main, ["alerts", "enable-receiver", "gone"],
                                    env={"GPUSLO_DATABASE_URL": database.url})
        assert result.exit_code == 0, result.output
        _until(lambda: _gone_state(http, ops)["pending"] == 0 and not _gone_state(http, ops)["disabled"])
        assert len(healthy.requests) == 5
    with database.session(readonly=True) as session:
        rows = list(audit.iter_audit(session, AuditFilter(action="receiver.enable")))
    assert [r.actor.split(":")[0] for r in rows] == ["token", "token", "cli"]
    assert all(r.target_id == "gone" and r.before["disabled"] and not r.after["disabled"] for r in rows)
