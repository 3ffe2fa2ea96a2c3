"""The probe kinds `gpuslo agent --probe` and `gpuslo serve --probe` know: ONE table.

Every kind has the same face: its module (a package's `__init__`, or the probe's single module) exports
`build_probe(arg, host) -> Probe`; start/jobs/stop are the Probe protocol (probe_api). Modules are imported only
when their probe is asked for, as some need what a node may lack (BCC for ebpf, NVML's library for nvml).
Adding a probe is its module and one line here; docs list every kind (a test checks)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpuslo.probes.probe_api import Probe

ProbeBuilder = Callable[[str | None, str], Probe]  # build_probe(arg, host): the argument after "NAME:", the host


@dataclass(frozen=True)
class ProbeKind:
    """A probe as `--probe` names it: the module holding its build_probe, its argument syntax, what it sees."""

    name: str
    module: str
    usage: str
    summary: str


PROBE_KINDS: Mapping[str, ProbeKind] = MappingProxyType({kind.name: kind for kind in (
    ProbeKind("nvml", "gpuslo.probes.nvml", "nvml", "Xid errors and device memory through NVML"),
    ProbeKind("ebpf", "gpuslo.probes.ebpf", "ebpf[:LIB,...]",
              "eBPF uprobes on libcuda/libcudart/libnccl: OOMs, CUDA, graph and NCCL errors"),
    ProbeKind("nccl", "gpuslo.probes.nccl", "nccl[:LIBNCCL,...]", "eBPF collective progress per rank"),
    ProbeKind("logs", "gpuslo.probes.logs", "logs:PATH[,PATH...]", "GPU incidents in text logs"),
    ProbeKind("tokens", "gpuslo.probes.tokens", "tokens:URL[,model=M,interval=S]",
              "token latency: a /metrics URL is scraped (vLLM/SGLang/TGI), any other is streamed to"),
    ProbeKind("dcgm", "gpuslo.probes.dcgm", "dcgm[:URL]", "dcgm-exporter health signals"),
    ProbeKind("attribution", "gpuslo.probes.attribution", "attribution:pid=P[+P],comm=NAME,port=N[,...]",
              "five-layer attribution of every token_stall"),
    ProbeKind("torch_allocator", "gpuslo.probes.torch_allocator",
              "torch_allocator[:interval=S,snapshot_min_interval=S]",
              "PyTorch allocator fragmentation of the process it runs in"),
)})
