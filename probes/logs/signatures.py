"""The root-or-cascade registry: every log-derived incident is classified, deterministically, by its signature.

A root is a failure that starts an incident by itself: an Xid or other driver/fabric fault, an out-of-memory,
an illegal address, a kernel assertion, a capture that broke a graph's rules, a network link that failed.
A cascade is what other processes or later calls report because of a root: NCCL watchdog timeouts and
communicator aborts (the collective waited for a rank that died or hung), a peer that hung up, "previous
error" statuses, a graph capture invalidated by an earlier error, Xid 45 (preemptive cleanup after another
error), a device marked unhealthy after its Xid. The first matching row decides; the table is the documentation
(docs/api.md, "Root or cascade"), and rules/rootcause.yaml correlates a job's roots and cascades.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuslo.probes.logs.patterns import Found

ROOT, CASCADE = "root", "cascade"


@dataclass(frozen=True)
class Signature:
    """One row: which incidents it covers, root or cascade, and why."""

    id: str
    kind: str
    role: str
    why: str
    test: Callable[[dict[str, Any]], bool] = lambda attrs: True


@dataclass(frozen=True)
class Role:
    signature: str
    role: str


def _name_in(*names: str) -> Callable[[dict[str, Any]], bool]:
    return lambda attrs: attrs.get("error_name") in names


def _fault_in(*faults: str) -> Callable[[dict[str, Any]], bool]:
    return lambda attrs: attrs.get("fault") in faults


_PREVIOUS = ("cudaErrorStreamCaptureInvalidated", "cudaErrorCudartUnloading", "ncclUnhandledCudaError")
_PEER_GONE = ("ncclRemoteError", "ncclCommAborted")

SIGNATURES: tuple[Signature, ...] = (
    Signature("xid-preemptive-cleanup", "gpu_xid", CASCADE, "Xid 45 is the driver cleaning up after another error",
              lambda attrs: attrs.get("xid") == 45),
    Signature("xid", "gpu_xid", ROOT, "the driver reported a GPU fault"),
    Signature("device-unhealthy", "gpu_fault", CASCADE, "the device plugin marks a GPU unhealthy after its Xid",
              _fault_in("device_unhealthy")),
    Signature("driver-fault", "gpu_fault", ROOT, "GSP, adapter init, memory, NVSwitch or fabric fault"),
    Signature("nonfinite-loss", "loss_nonfinite", ROOT, "a training loss or gradient became NaN or Inf"),
    Signature("oom", "cuda_oom", ROOT, "an allocation failed: the process asked for more memory than was free"),
    Signature("cuda-previous-error", "cuda_error", CASCADE, "a status that reports an earlier error",
              _name_in(*_PREVIOUS)),
    Signature("cuda-error", "cuda_error", ROOT, "a kernel or API call failed (illegal address, assert, ECC, ...)"),
    Signature("graph-invalidated", "cuda_graph_error", CASCADE,
              "the capture was invalidated by an earlier error (an OOM or a failed call during capture)",
              _name_in("cudaErrorStreamCaptureInvalidated", "CUDAGraphCaptureError")),
    Signature("graph-error", "cuda_graph_error", ROOT, "work that is not allowed under capture, or an update failure"),
    Signature("nccl-timeout", "nccl_timeout", CASCADE,
              "a collective or store waited for a rank that died, hung or never joined"),
    Signature("nccl-peer-gone", "nccl_error", CASCADE, "a peer exited or the communicator was aborted",
              _name_in(*_PEER_GONE)),
    Signature("nccl-previous-error", "nccl_error", CASCADE, "NCCL reports a CUDA error raised underneath it",
              _name_in("ncclUnhandledCudaError")),
    Signature("nccl-network", "nccl_error", ROOT, "a socket, verbs or system call of the transport failed here",
              _name_in("ncclSystemError")),
    Signature("nccl-error", "nccl_error", ROOT, "NCCL rejected a call (internal error, invalid usage)"),
)
_BY_KIND: dict[str, tuple[Signature, ...]] = {}
for _row in SIGNATURES:
    _BY_KIND[_row.kind] = (*_BY_KIND.get(_row.kind, ()), _row)


def classify(found: Found, family: str) -> Role:
    """The signature and role of one incident (the family is part of the id when no row names the kind)."""
    for row in _BY_KIND.get(found.kind, ()):
        if row.test(dict(found.attrs)):
            return Role(row.id, row.role)
    return Role(f"unclassified:{family}", ROOT)
