"""Split one token stall's time across the layers it was spent in, with the evidence behind each share.

The stall is the client's gap [start, end] on CLOCK_MONOTONIC. Where the server's thread was not itself in a
gap between two sends (a `send_gap` interval), the tokens were sent on time and the time is the network's.
The rest is given, first come first served, to: the network again (a send that waited for room in the socket's
send queue), the scheduler (a serving thread runnable but not running), the kernel (a long system call that is
not a chosen wait, then a page-fault burst), the driver (CUDA allocation and free), the GPU (a CUDA call waiting
for the device, then on-CPU time inside the CUDA libraries while the device was busy; the driver's when it was
not; on-CPU time compiling GPU kernels at run time, NVRTC and the like, is always the driver's), the driver
again (an ioctl outside those calls), the kernel again (an uninterruptible sleep outside a
system call), and last `compute`: the serving threads' own on-CPU work. What no signal covers is `unattributed`.
Block I/O completed during the stall and the process's page faults are evidence of the kernel share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpuslo.probes.attribution.signals import COMPUTE, DRIVER, GPU, KERNEL, NETWORK, SCHEDULER, GpuSample, Interval
from gpuslo.probes.attribution.spans import Span, intersect, length, subtract, union

LAYERS = (NETWORK, SCHEDULER, KERNEL, DRIVER, GPU, COMPUTE)
UNATTRIBUTED = "unattributed"
# Interval kinds in the order they claim the server-side time, with the layer each is counted in.
_PRIORITY: tuple[tuple[str, str], ...] = (
    ("send_blocked", NETWORK), ("send_stall", NETWORK), ("runnable", SCHEDULER), ("syscall", KERNEL),
    ("faults", KERNEL), ("cuda_alloc", DRIVER), ("cuda_wait", GPU), ("cuda_cpu", GPU), ("cuda_jit", DRIVER),
    ("ioctl", DRIVER),
    ("blocked", KERNEL), ("oncpu", COMPUTE))
# On-CPU time inside the CUDA libraries is the GPU's while the device was busy (a launch or wait spinning on a
# device that has no room for the work), the driver's otherwise.
BUSY_SM = 0.5
PREFIX = "attribution."
EVIDENCE_MAX = 1000


@dataclass(frozen=True)
class Attribution:
    """Milliseconds per layer (they and `unattributed_ms` add up to the gap), the dominant layer, the evidence
    sentence per layer that has a share, and the GPU features the clustering uses."""

    gap_ms: float
    shares_ms: Mapping[str, float]
    unattributed_ms: float
    dominant: str
    evidence: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    features: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    clock_error_us: float = 0.0

    @property
    def coverage(self) -> float:
        return 0.0 if self.gap_ms <= 0 else round(1 - self.unattributed_ms / self.gap_ms, 4)

    def attrs(self) -> dict[str, Any]:
        """The flat `attribution.*` attributes of a token_stall (what rules and the store see)."""
        out: dict[str, Any] = {f"{PREFIX}{layer}_ms": round(self.shares_ms.get(layer, 0.0), 3) for layer in LAYERS}
        out[f"{PREFIX}unattributed_ms"] = round(self.unattributed_ms, 3)
        out[f"{PREFIX}dominant"] = self.dominant
        out[f"{PREFIX}coverage"] = self.coverage
        out[f"{PREFIX}clock_error_us"] = round(self.clock_error_us, 3)
        text = "; ".join(f"{layer}: {self.evidence[layer]}" for layer in (*LAYERS, UNATTRIBUTED)
                         if layer in self.evidence)
        if text:
            out[f"{PREFIX}evidence"] = text[:EVIDENCE_MAX]
        out.update({f"{PREFIX}{name}": round(value, 4) for name, value in self.features.items()})
        return out


def _clip(intervals: Iterable[Interval], kind: str, window: Span) -> list[Interval]:
    return [i for i in intervals if i.kind == kind and i.end_ns > window[0] and i.start_ns < window[1]]


def _overlap_ms(interval: Interval, spans: list[Span]) -> float:
    return length(intersect([(interval.start_ns, interval.end_ns)], spans)) / 1e6


def _describe(kind: str, top: Interval, ms: float, count: int) -> str:
    more = f" (+{count - 1} more)" if count > 1 else ""
    if kind == "runnable":
        who = f"{top.other_comm or '?'} (pid {top.other_pid})" if top.other_pid else "another task"
        return f"thread {top.tid} runnable {ms:.0f} ms while {who} ran on CPU {top.cpu}{more}"
    if kind in ("cuda_alloc", "cuda_wait"):
        verb = "waited for the GPU" if kind == "cuda_wait" else "blocked"
        return f"{top.detail} {verb} {top.duration_ms:.0f} ms in thread {top.tid}{more}"
    if kind == "send_blocked":
        return f"{top.detail} waited {top.duration_ms:.0f} ms for room in the socket's send queue in thread " \
               f"{top.tid}{more}"
    if kind == "send_stall":
        return f"{top.detail} for {top.duration_ms:.0f} ms: the client did not take the bytes (thread " \
               f"{top.tid}){more}"
    if kind == "cuda_cpu":
        return f"thread {top.tid} on CPU {ms:.0f} ms inside the CUDA driver: {top.detail}{more}"
    if kind == "cuda_jit":
        return f"thread {top.tid} on CPU {ms:.0f} ms compiling GPU kernels at run time (a kernel or plan built " \
               f"for a new shape): {top.detail}{more}"
    if kind == "oncpu":
        return f"thread {top.tid} on CPU {ms:.0f} ms of the stall, its own work ({top.detail}){more}"
    if kind == "faults":
        return f"{top.detail} in {top.duration_ms:.0f} ms in thread {top.tid}{more}"
    if kind == "blocked":
        return f"thread {top.tid} in uninterruptible sleep {top.duration_ms:.0f} ms{more}"
    return f"{top.detail} {top.duration_ms:.0f} ms in thread {top.tid}{more}"


def _busy(samples: Sequence[GpuSample]) -> float:
    """How busy the GPU got during the stall: the peak SM active where GPM has it, else the peak utilization.
    The peak, not the mean: GPM samples of 50 ms ramp up and down around a held device (seen on the H200: peaks
    of 0.98 with means of 0.3 while another stream held every SM, peaks of 0.01 in every other phase)."""
    values = [s.sm_active if s.sm_active is not None else (s.util_pct or 0.0) / 100 for s in samples
              if s.sm_active is not None or s.util_pct is not None]
    return max(values, default=0.0)


def _block_io(intervals: Sequence[Interval], window: Span) -> str:
    found = [i for i in intervals if i.kind == "block_io" and window[0] <= i.end_ns <= window[1]]
    if not found:
        return ""
    mib = sum(int(i.detail.split()[0]) for i in found if i.detail.split()[0].isdigit()) / (1 << 20)
    longest = max(i.duration_ms for i in found)
    return f"{len(found)} block requests ({mib:.1f} MiB) completed during the stall, longest {longest:.0f} ms"


def _gpu_features(samples: Sequence[GpuSample], own_pids: frozenset[int]) -> tuple[dict[str, float], str]:
    if not samples:
        return {}, ""
    feats: dict[str, float] = {}
    utils = [s.util_pct for s in samples if s.util_pct is not None]
    if utils:
        feats["gpu_util_pct"] = sum(utils) / len(utils)
    for name in ("sm_active", "sm_occupancy", "dram_bw"):
        values = [getattr(s, name) for s in samples if getattr(s, name) is not None]
        if values:
            feats[name] = sum(values) / len(values)
            if name == "sm_active":
                feats["sm_active_max"] = max(values)
    shares: dict[int, list[float]] = {}
    for s in samples:
        for pid, sm in s.processes:
            shares.setdefault(pid, []).append(sm)
    others = {pid: max(v) for pid, v in shares.items() if pid not in own_pids}
    text = ", ".join(f"{k.replace('_pct', '')} {v:.0f}%" if k == "gpu_util_pct" else f"{k} {v * 100:.0f}%"
                     for k, v in feats.items())
    if others:
        pid, sm = max(others.items(), key=lambda kv: kv[1])
        feats["other_pid"] = float(pid)
        feats["other_sm_share"] = sm / 100.0
        text += f"; pid {pid} held {sm:.0f}% of the SMs"
    return feats, text


def attribute(start_ns: int, end_ns: int, intervals: Sequence[Interval], samples: Sequence[GpuSample] = (),
              *, own_pids: Iterable[int] = (), server_observed: bool = True,
              clock_error_ns: int = 0) -> Attribution:
    """The attribution of the stall [start_ns, end_ns] (CLOCK_MONOTONIC) from the intervals around it."""
    window = (start_ns, end_ns)
    whole = [window]
    server = union((i.start_ns, i.end_ns) for i in _clip(intervals, "send_gap", window))
    server = intersect(server, whole)
    network = subtract(whole, server) if server_observed else []
    shares = {layer: 0.0 for layer in LAYERS}
    shares[NETWORK] = length(network) / 1e6
    evidence: dict[str, str] = {}
    retransmits = _clip(intervals, "retransmit", (start_ns - 1_000_000_000, end_ns))
    if shares[NETWORK] >= 1.0:
        evidence[NETWORK] = (f"the server sent on time: no server-side gap over {shares[NETWORK]:.0f} ms of the "
                             f"stall; {len(retransmits)} TCP retransmits on the port")
    remaining = subtract(whole, network)
    best: dict[str, tuple[float, str]] = {}
    busy = _busy(samples)
    for kind, layer in _PRIORITY:
        if kind == "cuda_cpu" and busy < BUSY_SM:
            layer = DRIVER
        found = _clip(intervals, kind, window)
        if not found or not remaining:
            continue
        claimed = intersect(union((i.start_ns, i.end_ns) for i in found), remaining)
        ms = length(claimed) / 1e6
        if ms <= 0:
            continue
        remaining = subtract(remaining, claimed)
        shares[layer] += ms
        top = max(found, key=lambda i: _overlap_ms(i, claimed))
        if ms > best.get(layer, (0.0, ""))[0]:
            best[layer] = (ms, _describe(kind, top, ms, len(found)))
    for layer, (_, text) in best.items():
        evidence[layer] = f"{evidence[layer]}; {text}" if layer in evidence else text
    zero = _clip(intervals, "zero_window", window)
    if zero and shares[NETWORK] > 0:
        ms = length(intersect(union((i.start_ns, i.end_ns) for i in zero), whole)) / 1e6
        text = f"{zero[0].detail} for {ms:.0f} ms of the stall (it did not read)"
        evidence[NETWORK] = f"{evidence[NETWORK]}; {text}" if NETWORK in evidence else text
    io = _block_io(intervals, window)
    if io and shares[KERNEL] > 0:
        evidence[KERNEL] = f"{evidence[KERNEL]}; {io}"
    features, gpu_text = _gpu_features(samples, frozenset(own_pids))
    if gpu_text and shares[GPU] > 0:
        evidence[GPU] = f"{evidence.get(GPU, '')}; {gpu_text}".lstrip("; ")
    unattributed = length(remaining) / 1e6
    if unattributed > 0 and not evidence:
        evidence[UNATTRIBUTED] = "no signal covered the stall" + (f" ({gpu_text})" if gpu_text else "")
    gap = (end_ns - start_ns) / 1e6
    dominant = max(LAYERS, key=lambda layer: shares[layer])
    if shares[dominant] <= 0 or unattributed > shares[dominant]:
        dominant = UNATTRIBUTED
    return Attribution(gap, MappingProxyType(shares), unattributed, dominant, MappingProxyType(evidence),
                       MappingProxyType(features), clock_error_ns / 1e3)
