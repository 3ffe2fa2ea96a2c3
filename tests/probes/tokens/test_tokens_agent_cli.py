"""`gpuslo agent --probe tokens:URL` end to end: the real CLI in a child process scrapes (passive) or streams from
(active) the local server and ships to a real `gpuslo serve`, whose API then lists the events."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_process import serving_process
from test_tokens_passive import SCRAPE_1, SCRAPE_2

ROOT = Path(__file__).resolve().parents[3]
GPUSLO = Path(sys.executable).parent / "gpuslo"


@pytest.fixture(scope="module")
def gpuslo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`gpuslo serve` on a free port with the shipped rulebooks and its own SQLite file."""
    with serving_process(tmp_path_factory.mktemp("serve"), ROOT / "rules") as (_, url, _lines):
        yield url


def _events(server: str, kind: str, host: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server}/api/v1/events", params={"kind": kind, "host": host, "page_size": 200}, timeout=10)
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def _wait_for(server: str, kind: str, host: str, agent: subprocess.Popen[bytes], log: Path,
              timeout_s: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while not (found := _events(server, kind, host)):
        assert agent.poll() is None, f"the agent exited with {agent.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {kind} event from {host} in {timeout_s}s:\n{log.read_text()}"
        time.sleep(0.2)
    return found


def _agent(server: str, probe: str, host: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(GPUSLO), "agent", "--server", server, "--probe", probe, "--host", host,
             "--spool", str(tmp_path / "spool.db"), "--ship-interval", "0.2"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    return process, log


def _stop(agent: subprocess.Popen[bytes]) -> int:
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
    return agent.wait(timeout=30)


def test_agent_scrapes_a_metrics_page_and_ships_token_latency(gpuslo_server: str, stream_server: Any,
                                                               tmp_path: Path) -> None:
    stream_server.metrics_text = SCRAPE_1
    agent, log = _agent(gpuslo_server, f"tokens:{stream_server.base_url}/metrics,interval=1", "cli-passive",
                        tmp_path)
    try:
        (status, *_) = _wait_for(gpuslo_server, "probe_status", "cli-passive", agent, log)
        assert (status["attrs"]["probe"], status["attrs"]["state"]) == ("tokens", "up"), status
        stream_server.metrics_text = SCRAPE_2  # the histograms grew since the baseline scrape
        latency = _wait_for(gpuslo_server, "token_latency", "cli-passive", agent, log)
    finally:
        code = _stop(agent)
    assert code == 0, log.read_text()
    assert {e["source"] for e in latency} == {"tokens"}
    assert any(e["attrs"].get("ttft_ms") is not None for e in latency), latency  # the scraped TTFT histogram


def test_agent_streams_from_an_endpoint_and_ships_requests_and_latency(gpuslo_server: str, stream_server: Any,
                                                                       tmp_path: Path) -> None:
    probe = f"tokens:{stream_server.base_url}/quick/v1/chat/completions,model=tiny,interval=1,stall_ms=150"
    agent, log = _agent(gpuslo_server, probe, "cli-active", tmp_path)
    try:
        requests = _wait_for(gpuslo_server, "token_request", "cli-active", agent, log)
        latency = _wait_for(gpuslo_server, "token_latency", "cli-active", agent, log)
    finally:
        code = _stop(agent)
    assert code == 0, log.read_text()
    assert {"start", "first_token"} <= {e["attrs"]["phase"] for e in requests}, requests
    assert latency and {e["source"] for e in latency} == {"tokens"}
    assert any(s.path.startswith("/quick/") and s.body.get("model") == "tiny" for s in stream_server.served)
