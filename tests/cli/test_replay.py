"""`gpuslo replay` against the real app on a local port: counts, stored violations, bad lines, no server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from cli_support import EXAMPLE_INCIDENT, LiveServer
from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.cli.replay import replay_file

# What the shipped rulebooks must make of the bundled incident: rule id -> (host, gpu, occurrences).
EXPECTED_VIOLATIONS = {
    "fragmentation-high": ("gpu-node-7", 3, 2),
    "token-stall": ("gpu-node-7", 3, 2),
    "itl-p99-high": ("gpu-node-7", 3, 1),
    "cuda-oom": ("gpu-node-7", 3, 1),
    "cuda-oom-large-request": ("gpu-node-7", 3, 1),
    "nccl-watchdog-timeout": ("gpu-node-12", 5, 2),
    # Correlations: fragmentation followed by stalls on the same GPU; two ranks timing out on one collective.
    "fragmentation-then-stall": ("gpu-node-7", 3, 2),
    "collective-hang": ("gpu-node-12", 5, 1),
    # Measured SLOs: the slow requests burn the token-latency budget of the endpoint (rules/latency.yaml).
    "token-latency-burn-page": ("gpu-node-7", 3, 1),
    "token-latency-burn-ticket": ("gpu-node-7", 3, 1),
}


def _replay(*args: str):
    return CliRunner().invoke(main, ["replay", *args], catch_exceptions=False)


def _event(ident: str, ratio: float = 0.2) -> dict[str, object]:
    return {"id": ident, "kind": "mem_fragmentation", "time": "2025-01-01T00:00:00Z", "host": "node-a", "gpu": 0,
            "attrs": {"scope": "allocator", "fragmentation_ratio": ratio}}


def test_the_example_incident_yields_its_violations(live_server: LiveServer):
    lines = [line for line in EXAMPLE_INCIDENT.read_text().splitlines() if line.strip()]
    result = _replay(str(EXAMPLE_INCIDENT), "--server", live_server.url, "--batch-size", "7")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{len(lines)} events from {EXAMPLE_INCIDENT}: {len(lines)} accepted, 0 duplicate, 0 rejected, 0 conflict"
    ]
    assert live_server.core.wait_idle(20)
    listing = httpx.get(f"{live_server.url}/api/v1/violations", params={"page_size": 500}).json()
    got = {v["rule_id"]: (v["host"], v["gpu"], v["occurrences"]) for v in listing["items"]}
    assert got == EXPECTED_VIOLATIONS
    frag = next(v for v in listing["items"] if v["rule_id"] == "fragmentation-high")
    assert any("0.73 > 0.65" in c["text"] or c["observed"] == 0.73 for c in frag["explanation"]["conditions"])


def test_replaying_again_changes_nothing(live_server: LiveServer):
    first = replay_file(EXAMPLE_INCIDENT, live_server.url)
    second = replay_file(EXAMPLE_INCIDENT, live_server.url, batch_size=5)
    assert (first.accepted, first.duplicate) == (second.duplicate, second.accepted) == (first.total, 0)
    assert second.ok and second.refused == ()


def test_bad_lines_are_reported_with_their_numbers(live_server: LiveServer, tmp_path: Path):
    replay_file_path = tmp_path / "mixed.jsonl"
    replay_file_path.write_text("\n".join([
        json.dumps(_event("ok-1")),
        '{"id": "broken", "kind": ',
        "",
        json.dumps(_event("too-high", ratio=1.5)),
        json.dumps(_event("ok-1", ratio=0.3)),
        json.dumps(_event("ok-2")),
    ]) + "\n")
    result = _replay(str(replay_file_path), "--server", live_server.url, "--batch-size", "2")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "line 2: rejected: not JSON: Expecting value at column 26",
        "line 4: id too-high rejected: attrs.fragmentation_ratio: 1.5 is greater than the maximum of 1"
        " (rule: maximum)",
        "line 5: id ok-1 conflict: this id was stored before with another body",
        f"5 events from {replay_file_path}: 2 accepted, 0 duplicate, 2 rejected, 1 conflict",
    ]


def test_no_server_is_one_line_and_exit_2(closed_port: int):
    result = _replay(str(EXAMPLE_INCIDENT), "--server", f"http://127.0.0.1:{closed_port}")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"error: cannot connect to http://127.0.0.1:{closed_port}/api/v1/events:")
    assert "is `gpuslo serve` running there?" in errors[0]
    assert result.stdout == ""


def test_a_refused_batch_stops_with_the_server_reason(tmp_path: Path):
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer s3cret"
        return httpx.Response(413, json={"error": {"status": 413, "code": "too_many_events",
                                                   "message": "more than 2 events"}})

    from gpuslo.cli.replay import ReplayError

    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(_event("x")) + "\n")
    try:
        replay_file(path, "http://gpuslo.invalid", token="s3cret", transport=httpx.MockTransport(answer))
    except ReplayError as exc:
        assert str(exc) == "server refused the batch: HTTP 413 too_many_events: more than 2 events"
    else:
        raise AssertionError("a 413 must stop the replay")
