"""eBPF (BCC) probe on CUDA driver/runtime and NCCL calls: failures become cuda_oom, cuda_error,
cuda_graph_error and nccl_error events."""

from gpuslo.probes.ebpf.libraries import LibrarySet
from gpuslo.probes.ebpf.preflight import PreflightPaths, preflight
from gpuslo.probes.ebpf.probe import AttachPoint, CudaProbe, bpf_text

__all__ = ["AttachPoint", "CudaProbe", "LibrarySet", "PreflightPaths", "bpf_text", "preflight"]
