"""On-CPU samples of the serving threads turned into spans of time spent inside the CUDA libraries.

Each sample is (time, pid, tid, the top user frames). Samples with a frame in libcuda or libcudart (read from
/proc/PID/maps) and that follow each other within 1.5 sampling periods form one `cuda_cpu` span,
widened by half a period on each side: the thread was on a CPU inside the driver (spinning in a launch that
waits for room in the GPU's queue, or in a wait), not doing its own work."""

from __future__ import annotations

import bisect
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuslo.probes.attribution.signals import Interval

CUDA_LIBRARIES = ("libcuda.so", "libcudart.so")
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


@dataclass
class _Open:
    pid: int
    tid: int
    first_ns: int
    last_ns: int
    count: int
    where: str


class CudaSamples:
    """feed(t, pid, tid, ip) per sample; closed() → the finished cuda_cpu spans; open() → those still growing."""

    def __init__(self, hz: float, proc: str = "/proc", symbol: Callable[[int, int], str] | None = None):
        self.period_ns = int(1e9 / hz) if hz > 0 else 0  # 0 Hz: no sampler, so never fed
        self.proc = proc
        self.symbol = symbol
        self._maps: dict[int, list[tuple[int, int, str]]] = {}
        self._maps_read_at: dict[int, float] = {}
        self._open: dict[int, _Open] = {}
        self._closed: list[Interval] = []
        self.samples = self.in_cuda = 0
        self.modules: Counter[str] = Counter()  # the top frame's library of every sample: where on-CPU time went

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
        self.modules[os.path.basename(self.module(pid, frames[0])) or "?"] += 1
        hit = next(((ip, path) for ip in frames if ip
                    for path in (self.module(pid, ip),) if os.path.basename(path).startswith(CUDA_LIBRARIES)), None)
        if hit is None:
            return
        ip, path = hit
        self.in_cuda += 1
        span = self._open.get(tid)
        if span is not None and t_ns - span.last_ns <= self.period_ns * 3 // 2:
            span.last_ns, span.count = t_ns, span.count + 1
            return
        if span is not None:
            self._closed.append(self._interval(span))
        where = os.path.basename(path)
        if self.symbol is not None:
            where = f"{self.symbol(pid, ip) or '?'} in {where}"
        self._open[tid] = _Open(pid, tid, t_ns, t_ns, 1, where)

    def _interval(self, span: _Open) -> Interval:
        half = self.period_ns // 2
        return Interval("cuda_cpu", span.first_ns - half, span.last_ns + half, span.pid, span.tid,
                        f"{span.count} on-CPU samples in the CUDA driver ({span.where})")

    def closed(self) -> list[Interval]:
        done, self._closed = self._closed, []
        return done

    def open(self) -> list[Interval]:
        return [self._interval(s) for s in self._open.values()]
