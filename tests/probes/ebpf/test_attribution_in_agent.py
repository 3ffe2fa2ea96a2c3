"""The agent hands other probes' token_stall events to the attribution probe (real BPF program) before spooling."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from bpf_support import requires_bpf

from gpuslo.engine.events import format_time, parse_event
from gpuslo.probes.agent import Agent, AgentConfig
from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe


class StallProbe:
    name = "tokens"


@requires_bpf
def test_a_stall_from_another_probe_is_spooled_with_its_attribution(tmp_path):
    attribution = AttributionProbe(AttributionConfig(pids=(os.getpid(),), nvml=False), "node-7")
    attribution.start()
    try:
        time.sleep(0.25)  # this process, watched, does nothing for 250 ms: no server gap, no other signal
        stall = parse_event({"id": "s-1", "kind": "token_stall", "time": format_time(datetime.now(UTC)),
                             "host": "node-7", "attrs": {"gap_ms": 200.0}})
        other = parse_event({"id": "x-1", "kind": "gpu_xid", "time": format_time(stall.time),
                             "host": "node-7", "attrs": {"xid": 31}})
        agent = Agent(AgentConfig(server="http://127.0.0.1:9", spool_path=tmp_path / "spool.db", host="node-7"))
        agent.probes = [StallProbe(), attribution]  # type: ignore[list-item]
        enriched, untouched = agent._enriched(agent.probes[0], [stall, other])
        agent.spool.close()
    finally:
        attribution.stop()
    assert untouched == other
    assert enriched.attrs["gap_ms"] == 200.0 and enriched.attrs["attribution.dominant"] in (
        "network", "scheduler", "kernel", "unattributed")
    shares = sum(enriched.attrs[f"attribution.{x}_ms"] for x in
                 ("network", "scheduler", "kernel", "driver", "gpu", "unattributed"))
    assert abs(shares - 200.0) < 0.01
