"""The eBPF probe as the node agent runs it: `gpuslo agent --probe ebpf[:LIB,LIB...]`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.ebpf.libraries import LibrarySet, resolve
from gpuslo.probes.ebpf.probe import CudaProbe
from gpuslo.probes.probe_api import ProbeJob

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.5


@dataclass(frozen=True)
class EbpfProbeConfig:
    """Library paths to hook (empty: the loader's search path finds them), how often to read the ring, and whether
    failures nested in another hooked call (the driver's OOM inside cudaMalloc) are sent (`nested=0` counts them)."""

    libraries: tuple[str, ...] = ()
    poll_interval_s: float = POLL_INTERVAL_S
    ringbuf_pages: int = 256
    report_nested: bool = True

    @classmethod
    def parse(cls, arg: str | None) -> EbpfProbeConfig:
        """`/usr/lib/libcuda.so.1,/opt/torch/libcudart.so.13` → those paths; None or '' → the loader's;
        an item `nested=0` keeps nested failures counted, not sent."""
        items = [p.strip() for p in (arg or "").split(",") if p.strip()]
        nested = [i for i in items if i.startswith("nested=")]
        for item in nested:
            if item not in ("nested=0", "nested=1"):
                raise ProbeError(f"eBPF probe: '{item}' is not nested=0 or nested=1")
        paths = tuple(i for i in items if not i.startswith("nested="))
        return cls(libraries=paths, report_nested=not nested or nested[-1] == "nested=1")


class EbpfAgentProbe:
    """Adapts CudaProbe to the agent's Probe protocol: start builds and attaches, one job drains the ring."""

    name = "ebpf"

    def __init__(self, config: EbpfProbeConfig, host: str):
        self.config = config
        self.host = host
        self.probe: CudaProbe | None = None

    def libraries(self) -> LibrarySet:
        """Given paths first, gaps filled from the loader cache; ProbeError when nothing is found."""
        found = resolve(self.config.libraries)
        if not found.found():
            raise ProbeError("eBPF probe: no libcuda, libcudart or libnccl found on the loader path; "
                             "give their paths: --probe ebpf:/path/libcuda.so.1,/path/libcudart.so.N")
        return found

    def start(self) -> None:
        probe = CudaProbe(self.libraries(), self.host, ringbuf_pages=self.config.ringbuf_pages,
                          report_nested=self.config.report_nested)
        try:
            probe.start()
        except ProbeError:
            probe.close()
            raise
        self.probe = probe
        log.info("eBPF probe: %d functions hooked in %s", len(probe.attached),
                 ", ".join(sorted({p.path for p in probe.attached})))

    def poll(self) -> Sequence[Event]:
        if self.probe is None:
            raise ProbeError("eBPF probe: not started")
        return self.probe.poll(0)

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("ebpf-ring", self.config.poll_interval_s, self.poll),)

    def stop(self) -> None:
        if self.probe is not None:
            self.probe.close()
            self.probe = None


def build_probe(arg: str | None, host: str) -> EbpfAgentProbe:
    """The agent's entry point: `--probe ebpf` or `--probe ebpf:PATH[,PATH...]`."""
    return EbpfAgentProbe(EbpfProbeConfig.parse(arg), host)
