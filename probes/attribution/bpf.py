"""The attribution BPF program (signals.bpf.c) with its thresholds, and the CUDA calls it times."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.ebpf.functions import LIBCUDA, LIBCUDART

_HERE = Path(__file__).parent
ALLOC, WAIT = "cuda_alloc", "cuda_wait"


@dataclass(frozen=True)
class TimedCall:
    """A blocking CUDA call the program times: allocation/free (driver layer) or a wait for the GPU (GPU layer)."""

    library: str
    symbol: str
    kind: str


# The index is the function id in the records; append only. CUDA 13's cuGetProcAddress hands out the _v2
# entry points (checked on the H200 by scripts/gpu_node_check.py), so those are the ones hooked.
TIMED_CALLS: tuple[TimedCall, ...] = (
    TimedCall(LIBCUDA, "cuMemAlloc_v2", ALLOC), TimedCall(LIBCUDA, "cuMemFree_v2", ALLOC),
    TimedCall(LIBCUDA, "cuMemAllocAsync", ALLOC), TimedCall(LIBCUDA, "cuMemFreeAsync", ALLOC),
    TimedCall(LIBCUDART, "cudaMalloc", ALLOC), TimedCall(LIBCUDART, "cudaFree", ALLOC),
    TimedCall(LIBCUDA, "cuStreamSynchronize", WAIT), TimedCall(LIBCUDA, "cuCtxSynchronize_v2", WAIT),
    TimedCall(LIBCUDA, "cuEventSynchronize", WAIT), TimedCall(LIBCUDA, "cuMemcpyDtoH_v2", WAIT),
    TimedCall(LIBCUDA, "cuMemcpyDtoHAsync_v2", WAIT), TimedCall(LIBCUDART, "cudaStreamSynchronize", WAIT),
    TimedCall(LIBCUDART, "cudaDeviceSynchronize", WAIT), TimedCall(LIBCUDART, "cudaEventSynchronize", WAIT),
    TimedCall(LIBCUDART, "cudaMemcpyAsync", WAIT), TimedCall(LIBCUDART, "cudaMemcpy", WAIT),
)

# A runtime call that reaches the driver through the hooked driver call beside it: its wait is timed there too, so
# where the driver call is hit at least as often (what scripts/gpu_probe_costs.py checks on the real server), the
# runtime hook is a second trap pair per call for no new signal and can be left out (Collector's `skip`).
DRIVER_COUNTERPART: dict[str, str] = {
    "cudaStreamSynchronize": "cuStreamSynchronize", "cudaDeviceSynchronize": "cuCtxSynchronize_v2",
    "cudaEventSynchronize": "cuEventSynchronize", "cudaMemcpyAsync": "cuMemcpyDtoHAsync_v2",
    "cudaMemcpy": "cuMemcpyDtoH_v2", "cudaMalloc": "cuMemAlloc_v2", "cudaFree": "cuMemFree_v2",
}


def covered_calls(hits: dict[str, int]) -> frozenset[str]:
    """The runtime calls whose driver counterpart was hit at least as often (hits by symbol, over one run), and
    that were hit at all: those the driver hook times already."""
    return frozenset(rt for rt, drv in DRIVER_COUNTERPART.items()
                     if hits.get(rt, 0) > 0 and hits.get(drv, 0) >= hits[rt])


@dataclass(frozen=True)
class Thresholds:
    """Intervals shorter than these stay in the kernel (ns); a token's normal work is under all of them."""

    runnable_ns: int = 500_000     # down to the on-CPU merge gap: a preemption is scheduler time or on-CPU time
    syscall_ns: int = 2_000_000
    cuda_ns: int = 2_000_000
    send_gap_ns: int = 100_000_000  # above a token's normal time (50-70 ms for the H200 run's Python server)
    send_stall_ns: int = 2_000_000  # a TCP send queue of a serving thread full (EAGAIN) until it took bytes again
    block_ns: int = 5_000_000
    burst_gap_ns: int = 1_000_000  # allocation/free calls closer than this are one burst
    oncpu_ns: int = 1_000_000      # a serving thread's on-CPU span (slices merged) shorter than this stays
    oncpu_gap_ns: int = 500_000    # on-CPU slices less than this apart are one span
    blocked_ns: int = 2_000_000    # uninterruptible sleep (I/O, a kernel lock)
    fault_gap_ns: int = 200_000    # page faults of a thread closer than this are one burst ...
    fault_min: int = 32            # ... which counts when it has this many faults
    fault_ns: int = 1_000_000      # ... and lasts this long


DEFAULT_THRESHOLDS = Thresholds()


def check_comm(comm: str) -> str:
    """A thread-name prefix safe inside a C string literal (task comm is at most 15 bytes)."""
    if len(comm) > 15 or not all(c.isalnum() or c in "-_.:/" for c in comm):
        raise ProbeError(f"attribution probe: comm {comm!r}: at most 15 letters, digits or -_.:/")
    return comm


def build_text(thresholds: Thresholds = DEFAULT_THRESHOLDS, port: int = 0, ringbuf_pages: int = 256,
               calls: tuple[TimedCall, ...] = TIMED_CALLS, comm: str = "", cgroups: bool = False,
               send_length: bool = False) -> str:
    """The complete program: the thresholds, then signals.bpf.c, then one uprobe stub pair per timed call;
    `cgroups` compiles in the cgroup lookup for processes not (yet) watched by pid; `send_length` the send-queue
    stalls (the kernel has sock:sock_send_length, 6.3 on)."""
    t = thresholds
    defines = (f"#define AT_RUNNABLE_NS {t.runnable_ns}ULL\n#define AT_SYSCALL_NS {t.syscall_ns}ULL\n"
               f"#define AT_CUDA_NS {t.cuda_ns}ULL\n#define AT_SEND_GAP_NS {t.send_gap_ns}ULL\n"
               f"#define AT_BLOCK_NS {t.block_ns}ULL\n#define AT_BURST_GAP_NS {t.burst_gap_ns}ULL\n"
               f"#define AT_ONCPU_NS {t.oncpu_ns}ULL\n#define AT_ONCPU_GAP_NS {t.oncpu_gap_ns}ULL\n"
               f"#define AT_BLOCKED_NS {t.blocked_ns}ULL\n#define AT_FAULT_GAP_NS {t.fault_gap_ns}ULL\n"
               f"#define AT_FAULT_MIN {t.fault_min}ULL\n#define AT_FAULT_NS {t.fault_ns}ULL\n"
               f"#define AT_PORT {int(port)}\n#define AT_CGROUPS {int(cgroups)}\n"
               f"#define AT_SEND_LENGTH {int(send_length)}\n#define AT_SEND_STALL_NS {t.send_stall_ns}ULL\n"
               f"#define AT_RINGBUF_PAGES {ringbuf_pages}\n#define AT_COMM \"{check_comm(comm)}\"\n")
    stubs = "".join(
        f"int at_enter_{i}(struct pt_regs *ctx) {{ return at_cuda_enter({i}); }} /* {c.symbol} */\n"
        f"int at_leave_{i}(struct pt_regs *ctx) {{ return at_cuda_leave({i}, {int(c.kind == ALLOC)}); }}\n"
        for i, c in enumerate(calls))
    return defines + (_HERE / "signals.bpf.c").read_text() + "\n" + stubs


TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def has_tracepoint(category: str, name: str, roots: tuple[str, ...] = TRACEFS) -> bool:
    """Whether the running kernel has the tracepoint (a program naming a missing one does not load)."""
    return any(Path(root, "events", category, name, "format").is_file() for root in roots)
