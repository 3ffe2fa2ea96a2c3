"""`gpuslo probe tokens` against the real streaming test server."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.engine.events import parse_event


def test_probe_tokens_prints_request_latency_and_stall_events(stream_server):
    result = CliRunner().invoke(
        main, ["probe", "tokens", f"{stream_server.base_url}/stalls", "--model", "tiny", "--max-tokens", "20",
               "--host", "n1"])
    assert result.exit_code == 0, result.output
    events = [parse_event(json.loads(line)) for line in result.output.splitlines()]
    assert [e.kind for e in events] == ["token_request", "token_request", "token_latency", "token_stall",
                                        "token_stall", "token_request"]
    assert [e.attrs["phase"] for e in events if e.kind == "token_request"] == ["start", "first_token", "done"]
    assert [e.attrs["token_index"] for e in events if e.kind == "token_stall"] == [7, 15]
    assert len({e.attrs["request_id"] for e in events if e.kind != "token_latency"}) == 1
    assert all(e.host == "n1" and e.source == "tokens" for e in events)


def test_probe_tokens_gpu_goes_into_every_event(stream_server):
    """--gpu puts the GPU index in the envelope, which fragmentation-then-stall joins on (host, gpu)."""
    result = CliRunner().invoke(
        main, ["probe", "tokens", f"{stream_server.base_url}/stalls", "--model", "tiny", "--max-tokens", "20",
               "--host", "n1", "--gpu", "3"])
    assert result.exit_code == 0, result.output
    events = [parse_event(json.loads(line)) for line in result.output.splitlines()]
    assert [e.gpu for e in events] == [3] * 6 and {e.kind for e in events} == {"token_request", "token_latency",
                                                                               "token_stall"}
    refused = CliRunner().invoke(main, ["probe", "tokens", stream_server.base_url, "--model", "m", "--gpu", "-1"])
    assert refused.exit_code == 2 and "--gpu" in refused.output
