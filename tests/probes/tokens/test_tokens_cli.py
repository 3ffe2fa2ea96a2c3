"""`gpuslo probe tokens` against the real streaming test server."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.engine.events import parse_event


def test_probe_tokens_prints_latency_and_stall_events(stream_server):
    result = CliRunner().invoke(
        main, ["probe", "tokens", f"{stream_server.base_url}/stalls", "--model", "tiny", "--max-tokens", "20",
               "--host", "n1"])
    assert result.exit_code == 0, result.output
    events = [parse_event(json.loads(line)) for line in result.output.splitlines()]
    assert [e.kind for e in events] == ["token_latency", "token_stall", "token_stall"]
    assert [e.attrs["token_index"] for e in events[1:]] == [7, 15]
    assert all(e.host == "n1" and e.source == "tokens" for e in events)
