"""The log probe driven like the agent drives it: start, poll its job, stop; a restart repeats nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.logs import build_probe
from gpuslo.probes.logs.agent_probe import LogsAgentProbe

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
       "79.11 GiB of which 1.02 GiB is free. Process 12345 has 78.09 GiB memory in use. Of the allocated memory "
       "76.20 GiB is allocated by PyTorch, and 1.25 GiB is reserved by PyTorch but unallocated.\n")


def test_agent_probe_follows_files_and_resumes_without_repeats(tmp_path: Path):
    log = tmp_path / "worker.log"
    log.write_text("starting\n" + OOM + "next line\n")
    state = tmp_path / "state.json"
    probe = LogsAgentProbe([log], "node-7", state_file=state)
    probe.start()
    (job,) = probe.jobs()
    events = job.run()
    probe.stop()
    assert [(e.kind, e.gpu, e.attrs["requested_bytes"]) for e in events] == [("cuda_oom", 3, 2 << 30)]
    again = LogsAgentProbe([log], "node-7", state_file=state)
    again.start()
    assert again.poll() == []
    again.stop()


def test_build_probe_needs_a_path():
    with pytest.raises(ProbeError, match="no file to follow"):
        build_probe(None, "h").start()
