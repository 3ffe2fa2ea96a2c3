"""Nothing is lost when the agent is killed with SIGKILL while the server is down, then restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_ingest_server import IngestServer

from gpuslo.engine.events import parse_event
from gpuslo.probes.spool import Spool

HERE = Path(__file__).parent
COUNT = 400


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _kill9(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL


def _spool_while_down(spool_path: Path, dead_port: int) -> list[str]:
    """Run the writer against a refused port and SIGKILL it mid-way; the ids it reported committed."""
    writer = subprocess.Popen(
        [sys.executable, str(HERE / "spool_writer.py"), str(spool_path), f"http://127.0.0.1:{dead_port}",
         str(COUNT)], stdout=subprocess.PIPE, text=True)
    committed = []
    assert writer.stdout is not None
    for line in writer.stdout:
        committed.append(line.strip())
        if len(committed) == COUNT // 2:
            break
    _kill9(writer)  # while it is still appending: later ids may be committed but not reported
    writer.stdout.close()
    return committed


def _start_agent(spool_path: Path, url: str) -> subprocess.Popen:
    with open(spool_path.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuslo.cli.agent", "--server", url, "--spool", str(spool_path),
             "--host", "node-k", "--ship-interval", "0.2"], stdout=subprocess.DEVNULL, stderr=log)


def _spooled(spool_path: Path) -> int:
    spool = Spool(spool_path)
    try:
        return len(spool)
    finally:
        spool.close()


def test_events_survive_kill9_and_arrive_once_the_server_is_back(tmp_path: Path, dead_port: int) -> None:
    spool_path = tmp_path / "agent-spool.db"
    committed = _spool_while_down(spool_path, dead_port)
    server = IngestServer(mode="lose_once")  # the first answer is lost after the server stored the batch
    agent = _start_agent(spool_path, server.url)
    try:
        _wait_for(lambda: set(committed) <= set(server.log.stored), 60, "every committed event to arrive")
        _wait_for(lambda: _spooled(spool_path) == 0, 30, "the agent to ack everything")
        _kill9(agent)
        received = [i for i in server.log.received_ids if i.startswith("kill-")]
        stored = sorted(i for i in server.log.stored if i.startswith("kill-"))
        # Nothing lost, nothing invented: the stored ids are exactly kill-00000 .. kill-(n-1), n >= committed.
        assert stored == [f"kill-{i:05d}" for i in range(len(stored))]
        assert len(stored) >= len(committed)
        # The lost answer made the agent send its first batch again: repeats carry the same id and body.
        assert len(received) > len(stored)
        assert server.log.conflicts == []
        # A restarted agent sends nothing again: acknowledgements were durable too.
        before = len(server.log.received_ids)
        spool = Spool(spool_path)
        spool.append([parse_event({"id": "marker", "kind": "gpu_xid", "time": "2025-01-01T00:00:01Z",
                                   "host": "node-k", "attrs": {"xid": 13}})])
        spool.close()
        agent = _start_agent(spool_path, server.url)
        # The spool is ordered: once the marker arrived, anything still unacked before it was sent too.
        _wait_for(lambda: "marker" in server.log.stored, 60, "the restarted agent to ship")
        assert [i for i in server.log.received_ids[before:] if i.startswith("kill-")] == []
    finally:
        if agent.poll() is None:
            agent.terminate()
            agent.wait(10)
        server.close()
