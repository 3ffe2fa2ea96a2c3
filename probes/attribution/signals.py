"""The typed signals the attribution works on: intervals on CLOCK_MONOTONIC, each tied to a layer."""

from __future__ import annotations

from dataclasses import dataclass

# Layers a stall's time is split across, in the order they are shown. `compute` is the serving threads' own
# on-CPU work (between two tokens the engine thread computes the next one): time no other layer took from it.
NETWORK, SCHEDULER, KERNEL, DRIVER, GPU, COMPUTE = "network", "scheduler", "kernel", "driver", "gpu", "compute"

# System calls that are waits the thread chose (a lock, a poll loop, a sleep, an idle socket read): their
# length says nothing about the kernel, so they are never a kernel share.
WAIT_SYSCALLS = frozenset({0, 7, 23, 24, 34, 35, 43, 45, 47, 61, 128, 202, 230, 232, 270, 271, 281, 288, 441})
IOCTL = 16
SYSCALL_NAMES = {0: "read", 1: "write", 9: "mmap", 11: "munmap", 16: "ioctl", 17: "pread64", 18: "pwrite64",
                 20: "writev", 26: "msync", 28: "madvise", 44: "sendto", 46: "sendmsg", 74: "fsync",
                 75: "fdatasync", 257: "openat", 3: "close", 10: "mprotect", 77: "ftruncate", 285: "fallocate",
                 318: "getrandom", 4: "stat", 262: "newfstatat"}


@dataclass(frozen=True)
class Interval:
    """Something a serving thread spent time in (or the server's own gap between two sends)."""

    kind: str          # runnable, syscall, ioctl, cuda_alloc, cuda_wait, send_gap, send_blocked, send_stall,
    #                    block_io, retransmit, oncpu, blocked (uninterruptible sleep), faults (a page-fault burst),
    #                    cuda_cpu and cuda_jit (on-CPU samples in the CUDA driver, in a run-time kernel compiler)
    start_ns: int      # CLOCK_MONOTONIC
    end_ns: int
    pid: int = 0
    tid: int = 0
    detail: str = ""   # what evidence says: the process that ran instead, the call, the syscall
    other_pid: int = 0
    other_comm: str = ""
    cpu: int = -1

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


@dataclass(frozen=True)
class GpuSample:
    """One NVML reading, timed on CLOCK_MONOTONIC: the GPU's busy share, GPM counters where the device has them,
    and the other processes' SM shares (per-process utilization)."""

    t_ns: int
    gpu: int
    util_pct: float | None = None
    sm_active: float | None = None        # GPM, 0..1
    sm_occupancy: float | None = None     # GPM, 0..1
    dram_bw: float | None = None          # GPM, 0..1 of peak
    processes: tuple[tuple[int, float], ...] = ()  # (pid, SM %) over the last sampling period
