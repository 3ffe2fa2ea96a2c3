"""On-CPU samples of the serving threads turned into spans of time spent inside the CUDA libraries.

Each sample is (time, pid, tid, the top user frames). Samples with a frame in libcuda or libcudart (read from
/proc/PID/maps) and that follow each other within 1.5 sampling periods form one `cuda_cpu` span,
widened by half a period on each side: the thread was on a CPU inside the driver (spinning in a launch that
waits for room in the GPU's queue, or in a wait), not doing its own work."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuslo.probes.attribution.signals import Interval

CUDA_LIBRARIES = ("libcuda.so", "libcudart.so")


def _maps(pid: int, proc: str) -> list[tuple[int, int, str]]:
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
    return found


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
        self.period_ns = int(1e9 / hz)
        self.proc = proc
        self.symbol = symbol
        self._maps: dict[int, list[tuple[int, int, str]]] = {}
        self._open: dict[int, _Open] = {}
        self._closed: list[Interval] = []
        self.samples = self.in_cuda = 0
        self.modules: Counter[str] = Counter()  # the top frame's library of every sample: where on-CPU time went

    def module(self, pid: int, ip: int) -> str:
        for attempt in (0, 1):
            if attempt or pid not in self._maps:
                self._maps[pid] = _maps(pid, self.proc)
            for start, end, path in self._maps[pid]:
                if start <= ip < end:
                    return path
        return ""

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
