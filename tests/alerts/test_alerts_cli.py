"""`gpuslo alerts test` against a real generic-webhook receiver on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from click.testing import CliRunner

from gpuslo.cli.main import main


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_alerts_test_sends_through_the_route_and_prints_each_answer(tmp_path, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HOOK_SECRET", "whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0")
    config = tmp_path / "alerts.yaml"
    config.write_text(f"""\
receivers:
  - name: hook
    type: webhook
    allow_private_network: true   # the receiver listens on 127.0.0.1
    allow_http: true
    url: http://127.0.0.1:{server.server_address[1]}/hook
    secret: env:HOOK_SECRET
routes:
  - name: everything
    receivers: [hook]
""")
    try:
        result = CliRunner().invoke(main, ["alerts", "test", "--config", str(config)])
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 0, result.output
    assert "hook (webhook) trigger: delivered HTTP 204" in result.output
    assert "c2VjcmV0" not in result.output
    assert len(_Receiver.bodies) >= 1


def test_alerts_test_refuses_a_loopback_receiver_without_the_allowance(tmp_path):
    config = tmp_path / "alerts.yaml"
    config.write_text("receivers:\n  - {name: hook, type: webhook, url: 'https://127.0.0.1:9/hook'}\n"
                      "routes:\n  - {receivers: [hook]}\n")
    result = CliRunner().invoke(main, ["alerts", "test", "--config", str(config)])
    assert result.exit_code != 0
    assert (f'{config}:2:38: receiver "hook": url https://127.0.0.1:9/hook resolves to 127.0.0.1, a loopback address '
            "(set allow_private_network: true on this receiver to allow it)") in result.output
