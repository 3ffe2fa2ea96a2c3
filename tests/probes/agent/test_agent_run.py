"""The agent in-process: probes that cannot run are reported unavailable, the rest are sampled and shipped."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.agent import Agent, AgentConfig, ProbeSpec, load_probe, probe_specs
from gpuslo.probes.kinds import PROBE_KINDS
from gpuslo.probes.probe_api import ProbeJob


class TickProbe:
    """Emits one gpu_xid event per run; a second job fails every time."""

    name = "ticks"

    def __init__(self, host: str):
        self.host, self.count, self.stopped = host, 0, False

    def start(self) -> None:
        return None

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("ticks-emit", 0.05, self.emit), ProbeJob("ticks-broken", 0.05, self.broken))

    def emit(self) -> Sequence[Event]:
        self.count += 1
        return [parse_event({"id": f"tick-{self.count}", "kind": "gpu_xid", "time": "2025-01-01T00:00:00Z",
                             "host": self.host, "attrs": {"xid": 31}})]

    def broken(self) -> Sequence[Event]:
        raise RuntimeError("sensor went away")

    def stop(self) -> None:
        self.stopped = True


def _wait(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_agent_reports_unavailable_probes_and_ships_the_others(tmp_path: Path, ingest) -> None:
    ticks: list[TickProbe] = []

    def factory(spec: ProbeSpec, host: str):
        if spec.name == "ticks":
            ticks.append(TickProbe(host))
            return ticks[-1]
        return load_probe(spec, host)

    config = AgentConfig(server=ingest.url, spool_path=tmp_path / "spool.db", host="node-z", token="t0k",
                         probes=probe_specs(["nvml", "nosuch", "ticks", "Bad-Name"]), ship_interval_s=0.1)
    agent = Agent(config, factory=factory)
    agent.start()
    try:
        _wait(lambda: "tick-3" in ingest.log.stored and len(agent.probe_states()) == 4)
    finally:
        agent.stop()
    assert ticks[0].stopped
    stored = [json.loads(body) for body in ingest.log.stored.values()]
    status = {s["attrs"]["probe"]: s["attrs"] for s in stored if s["kind"] == "probe_status"}
    # This machine has no NVIDIA driver: the real NVML probe is unavailable, with the reason.
    assert status["nvml"]["state"] == "unavailable"
    assert "libnvidia-ml.so.1" in status["nvml"]["detail"]
    assert status["nosuch"] == {"probe": "nosuch", "state": "unavailable", "dropped": 0,
                                "detail": "nosuch: no such probe in this build of gpuslo (probes: "
                                          + ", ".join(PROBE_KINDS) + ")"}
    assert "not a probe name" in status["Bad-Name"]["detail"]
    # One job of the probe fails on every run: the probe is degraded, reported once, not flapping.
    states = [s["attrs"]["state"] for s in stored if s["kind"] == "probe_status" and s["attrs"]["probe"] == "ticks"]
    assert states == ["up", "degraded"]
    degraded = next(s for s in stored if s["kind"] == "probe_status" and s["attrs"]["state"] == "degraded")
    assert degraded["attrs"]["detail"] == "ticks-broken: RuntimeError: sensor went away"
    assert all(r["headers"]["Authorization"] == "Bearer t0k" for r in ingest.log.requests)
    assert {s["host"] for s in stored} == {"node-z"}


def test_agent_stop_keeps_unshipped_events_on_disk(tmp_path: Path, make_event, dead_port: int) -> None:
    config = AgentConfig(server=f"http://127.0.0.1:{dead_port}", spool_path=tmp_path / "spool.db", host="n",
                         ship_interval_s=0.1)
    agent = Agent(config)
    agent.spool.append([make_event()])
    agent.start()
    agent.stop()
    again = Agent(config)
    assert "ev-1" in [s.event_id for s in again.spool.read_batch(10)]
    again.spool.close()
    again.shipper.close()


def test_probe_specs_parse_name_and_argument() -> None:
    assert probe_specs(["nvml", "logs:/var/log/a:b.log"]) == (
        ProbeSpec("nvml"), ProbeSpec("logs", "/var/log/a:b.log"))
    assert str(ProbeSpec("logs", "/x")) == "logs:/x"


def test_a_module_that_is_not_in_the_probe_table_is_no_probe() -> None:
    # Before the table, any gpuslo.probes.<name> module was tried; the spool module is not a probe.
    with pytest.raises(ProbeError, match="spool: no such probe"):
        load_probe(ProbeSpec("spool"), "h")
