"""eBPF (BCC) probe on CUDA driver/runtime and NCCL calls: failures become cuda_oom, cuda_error,
cuda_graph_error and nccl_error events."""

from gpuslo.probes.ebpf.agent_probe import EbpfAgentProbe, build_probe
from gpuslo.probes.ebpf.libraries import LibrarySet
from gpuslo.probes.ebpf.preflight import PreflightPaths, preflight
from gpuslo.probes.ebpf.probe import AttachPoint, CudaProbe, bpf_text

__all__ = ["AttachPoint", "CudaProbe", "EbpfAgentProbe", "LibrarySet", "PreflightPaths", "bpf_text", "build_probe",
           "preflight"]
