"""On-CPU samples of the serving threads turned into spans of time spent inside the CUDA libraries.

Each sample is (time, pid, tid, the top user frames). Samples whose first frame found in a CUDA library (read
from /proc/PID/maps) is in libcuda or libcudart, and that follow each other within 1.5 sampling periods, form
one `cuda_cpu` span, widened by half a period on each side: the thread was on a CPU inside the driver (spinning
in a launch that waits for room in the GPU's queue, or in a wait), not doing its own work. Samples in a run-time
kernel compiler (NVRTC, nvJitLink, the PTX compiler, cuDNN's run-time compiled engines) form `cuda_jit` spans
the same way: the thread was compiling GPU kernels on the CPU (seen on the H200: cuDNN attention plans built
with NVRTC at every decoded token, since PyTorch caches them per thread and per KV length)."""

from __future__ import annotations

import bisect
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from gpuslo.probes.attribution.signals import Interval

CUDA_LIBRARIES = ("libcuda.so", "libcudart.so")
JIT_LIBRARIES = ("libnvrtc.so", "libnvrtc-builtins.so", "libnvJitLink.so", "libnvptxcompiler",
                 "libcudnn_engines_runtime_compiled.so")
RECENT_MAX = 200_000  # samples kept for modules_between (about 1000 s of one thread at 199 Hz)
MAPS_REFRESH_S = 1.0  # the least time between two reads of one process's maps after a miss


def _maps(pid: int, proc: str) -> list[tuple[int, int, str]]:
    """The executable mappings of a process, sorted by start address (empty when it is gone)."""
    found = []
    try:
        text = Path(proc, str(pid), "maps").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "x" in parts[1]:
            start, _, end = parts[0].partition("-")
            found.append((int(start, 16), int(end, 16), parts[5].strip()))
    return sorted(found)


def _lookup(maps: list[tuple[int, int, str]], ip: int) -> str | None:
    """The path of the sorted mapping holding `ip`, None when none does."""
    at = bisect.bisect_right(maps, (ip, float("inf"), "")) - 1
    if at >= 0 and maps[at][0] <= ip < maps[at][1]:
        return maps[at][2]
    return None


def category(path: str) -> str:
    """`cuda_jit` for a run-time kernel compiler, `cuda_cpu` for the driver or runtime, "" for anything else."""
    name = os.path.basename(path)
    if name.startswith(JIT_LIBRARIES):
        return "cuda_jit"
    return "cuda_cpu" if name.startswith(CUDA_LIBRARIES) else ""


@dataclass
class _Open:
    pid: int
    tid: int
    first_ns: int
    last_ns: int
    count: int
    where: str
    kind: str = "cuda_cpu"


class CudaSamples:
    """feed(t, pid, tid, frames) per sample; closed() → the finished cuda_cpu/cuda_jit spans; open() → those
    still growing; modules_between() → where the recent samples' first frames were."""

    def __init__(self, hz: float, proc: str = "/proc", symbol: Callable[[int, int], str] | None = None):
        self.period_ns = int(1e9 / hz) if hz > 0 else 0  # 0 Hz: no sampler, so never fed
        self.proc = proc
        self.symbol = symbol
        self._maps: dict[int, list[tuple[int, int, str]]] = {}
        self._maps_read_at: dict[int, float] = {}
        self._open: dict[int, _Open] = {}
        self._closed: list[Interval] = []
        self.samples = self.in_cuda = self.in_jit = 0
        self.modules: Counter[str] = Counter()  # the top frame's library of every sample: where on-CPU time went
        self.recent: deque[tuple[int, int, str]] = deque(maxlen=RECENT_MAX)  # (t_ns, tid, top frame's library)

    def module(self, pid: int, ip: int) -> str:
        """The path of the mapping holding `ip` ("" when none does). A miss reads the maps again (a library loaded
        since), at most once per `MAPS_REFRESH_S` per process: frames outside any file mapping (JIT code, the
        vDSO's neighbours) would otherwise re-read and parse the whole maps file at every sample."""
        maps = self._maps.get(pid)
        if maps is None:
            maps = self._read_maps(pid)
        path = _lookup(maps, ip)
        if path is None and time.monotonic() - self._maps_read_at.get(pid, 0.0) >= MAPS_REFRESH_S:
            path = _lookup(self._read_maps(pid), ip)
        return path or ""

    def _read_maps(self, pid: int) -> list[tuple[int, int, str]]:
        self._maps[pid] = maps = _maps(pid, self.proc)
        self._maps_read_at[pid] = time.monotonic()
        return maps

    def feed(self, t_ns: int, pid: int, tid: int, frames: tuple[int, ...]) -> None:
        """One sample: its time, thread and top user frames (the first is the instruction pointer)."""
        self.samples += 1
        top = os.path.basename(self.module(pid, frames[0])) or "?"
        self.modules[top] += 1
        self.recent.append((t_ns, tid, top))
        hit = next(((ip, path, kind) for ip in frames if ip
                    for path in (self.module(pid, ip),) for kind in (category(path),) if kind), None)
        if hit is None:
            return
        ip, path, kind = hit
        if kind == "cuda_jit":
            self.in_jit += 1
        else:
            self.in_cuda += 1
        span = self._open.get(tid)
        if span is not None and span.kind == kind and t_ns - span.last_ns <= self.period_ns * 3 // 2:
            span.last_ns, span.count = t_ns, span.count + 1
            return
        if span is not None:
            self._closed.append(self._interval(span))
        where = os.path.basename(path)
        if self.symbol is not None:
            where = f"{self.symbol(pid, ip) or '?'} in {where}"
        self._open[tid] = _Open(pid, tid, t_ns, t_ns, 1, where, kind)

    def _interval(self, span: _Open) -> Interval:
        half = self.period_ns // 2
        what = "compiling GPU kernels" if span.kind == "cuda_jit" else "in the CUDA driver"
        return Interval(span.kind, span.first_ns - half, span.last_ns + half, span.pid, span.tid,
                        f"{span.count} on-CPU samples {what} ({span.where})")

    def modules_between(self, start_ns: int, end_ns: int, tids: Iterable[int] | None = None) -> dict[str, int]:
        """How many of the kept samples in [start_ns, end_ns] (of `tids`, else of every thread) had their first
        frame in each library: what a stall's on-CPU time was spent in."""
        wanted = None if tids is None else set(tids)
        found: Counter[str] = Counter(m for t, tid, m in list(self.recent)  # a copy: the drain thread appends
                                      if start_ns <= t <= end_ns and (wanted is None or tid in wanted))
        return dict(found.most_common())

    def closed(self) -> list[Interval]:
        done, self._closed = self._closed, []
        return done

    def open(self) -> list[Interval]:
        return [self._interval(s) for s in self._open.values()]
