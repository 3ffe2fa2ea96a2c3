"""The NCCL collective probe as the agent runs it: `--probe nccl[:LIBNCCL,...]`.

Without paths it hooks every libnccl that running processes map (a PyTorch wheel's `nvidia/nccl/lib` copy
included) and looks again every `rescan_s`, so a job started after the agent is hooked too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.ebpf.nccl_probe import NcclProbe, libnccl_in_use
from gpuslo.probes.probe_api import ProbeJob

POLL_INTERVAL_S = 1.0
RESCAN_S = 10.0


class NcclAgentProbe:
    name = "nccl"

    def __init__(self, libraries: tuple[str, ...], host: str, *, rescan_s: float = RESCAN_S):
        self.libraries, self.host, self.rescan_s = libraries, host, rescan_s
        self.probe: NcclProbe | None = None
        self._scanned = 0.0

    def start(self) -> None:
        missing = [p for p in self.libraries if not os.path.isfile(p)]
        if missing:
            raise ProbeError(f"NCCL probe: library {missing[0]} does not exist; give the libnccl.so.2 the job "
                             "loads (see its /proc/PID/maps)")
        probe = NcclProbe(self.libraries, self.host)
        probe.start()
        self.probe = probe
        self._rescan()

    def _rescan(self) -> None:
        if self.probe is not None and not self.libraries:
            for path in libnccl_in_use():
                self.probe.attach_library(path)
        self._scanned = time.monotonic()

    def poll(self) -> Sequence[Event]:
        if self.probe is None:
            raise ProbeError("NCCL probe: not started")
        if not self.libraries and time.monotonic() - self._scanned >= self.rescan_s:
            self._rescan()
        return self.probe.poll()

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("nccl-progress", POLL_INTERVAL_S, self.poll),)

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.close()
            self.probe = None


def build_probe(arg: str | None, host: str) -> NcclAgentProbe:
    """`--probe nccl` (hook what running jobs load) or `--probe nccl:/path/libnccl.so.2[,...]`."""
    return NcclAgentProbe(tuple(p.strip() for p in (arg or "").split(",") if p.strip()), host)
