"""Loads the attribution BPF program, watches the serving processes, and turns ring-buffer records into Intervals."""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.attribution.bpf import DEFAULT_THRESHOLDS, TIMED_CALLS, Thresholds, build_text, has_tracepoint
from gpuslo.probes.attribution.cgroups import Cgroup
from gpuslo.probes.attribution.samples import CudaSamples
from gpuslo.probes.attribution.signals import IOCTL, SYSCALL_NAMES, WAIT_SYSCALLS, Interval
from gpuslo.probes.ebpf.libraries import LibrarySet
from gpuslo.probes.ebpf.preflight import preflight

log = logging.getLogger(__name__)
(RUNNABLE, SYSCALL, CUDA, SEND_GAP, RETRANSMIT, BLOCK_IO, ONCPU, BLOCKED, FAULTS, SAMPLE, SEND_STALL,
 ZERO_WINDOW) = range(1, 13)
SEND_STALL_TRACEPOINTS = (("sock", "sock_send_length"), ("tcp", "tcp_probe"), ("sock", "inet_sock_set_state"))
SOCKET_SENDS = frozenset({44, 46})  # sendto, sendmsg: a long one waited for room in the send queue
FD_WRITES = frozenset({1, 20})  # write, writev: their fd rides in the record (signals.bpf.c)
SOCKETS = "socket:"  # what /proc/<pid>/fd/N reads for a socket
NVIDIA_DEVICES = "/dev/nvidia"  # nvidiactl, nvidia0..N, nvidia-uvm, nvidia-modeset: the driver's ioctls


class Record(ctypes.Structure):
    """struct at_record of signals.bpf.c."""

    _fields_ = [("start_ns", ctypes.c_uint64), ("end_ns", ctypes.c_uint64), ("arg", ctypes.c_uint64),
                ("pid", ctypes.c_uint32), ("tid", ctypes.c_uint32), ("other_pid", ctypes.c_uint32),
                ("cpu", ctypes.c_uint32), ("kind", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("other_comm", ctypes.c_char * 16), ("frames", ctypes.c_uint64 * 3)]


def fd_path(pid: int, fd: int) -> str | None:
    """What a process's file descriptor names (`/dev/nvidiactl`), or None once it is closed or the process gone."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def _ioctl(fd: int, path: str | None, base: dict[str, Any]) -> Interval:
    """A long ioctl: the driver's on an NVIDIA device file; the kernel's on any other file; the driver's, as
    before fds were read, when the fd was closed before the record was read (the CUDA driver keeps its open)."""
    if path is None:
        return Interval("ioctl", detail=f"ioctl (fd {fd})", **base)
    return Interval("ioctl" if path.startswith(NVIDIA_DEVICES) else "syscall", detail=f"ioctl on {path}", **base)


def to_interval(r: Record, paths: Callable[[int, int], str | None] = fd_path) -> Interval | None:
    """The Interval a record stands for; None for a wait the thread chose (futex, poll, sleep, idle read).
    `paths`: what (pid, fd) names, for the device of an ioctl."""
    base = {"start_ns": r.start_ns, "end_ns": r.end_ns, "pid": r.pid, "tid": r.tid, "cpu": r.cpu}
    if r.kind == RUNNABLE:
        return Interval("runnable", other_pid=r.other_pid, other_comm=r.other_comm.decode(errors="replace"),
                        **base)
    if r.kind == SYSCALL:
        number = r.arg & 0xFFFFFFFF  # an ioctl's fd is in the upper half (signals.bpf.c)
        if number in WAIT_SYSCALLS:
            return None
        if number == IOCTL:
            fd = r.arg >> 32
            return _ioctl(fd, paths(r.pid, fd), base)
        name = SYSCALL_NAMES.get(number, f"syscall {number}")
        if number in FD_WRITES:  # a long write to a socket waited for room in its send queue, as a long send
            path = paths(r.pid, r.arg >> 32)
            if path is not None and path.startswith(SOCKETS):
                return Interval("send_blocked", detail=f"{name} on {path}", **base)
            return Interval("syscall", detail=f"{name} to {path}" if path else name, **base)
        return Interval("send_blocked" if number in SOCKET_SENDS else "syscall", detail=name, **base)
    if r.kind == CUDA:
        return _cuda(r.arg & 0xFFFFFFFF, r.arg >> 32, base)
    if r.kind == SEND_GAP:
        return _send_gap(r, paths, base)
    if r.kind == RETRANSMIT:
        return Interval("retransmit", detail=f"sport {r.arg >> 16} dport {r.arg & 0xFFFF}", **base)
    if r.kind == BLOCK_IO:
        return Interval("block_io", detail=f"{r.arg} bytes", **base)
    if r.kind == ONCPU:
        return Interval("oncpu", detail=f"{r.arg} slices", **base)
    if r.kind == BLOCKED:
        return Interval("blocked", detail="uninterruptible sleep", **base)
    if r.kind == FAULTS:
        return Interval("faults", detail=f"{r.arg} page faults", **base)
    if r.kind == ZERO_WINDOW:
        return Interval("zero_window", detail=f"the client's receive window was 0 on port {r.arg}", **base)
    if r.kind == SEND_STALL:
        return Interval("send_stall", detail=f"TCP send queue full on port {r.arg}" if r.arg else
                        "TCP send queue full", **base)
    return None


def _send_gap(r: Record, paths: Callable[[int, int], str | None], base: dict[str, Any]) -> Interval | None:
    """A thread's gap between two sends: sendto/sendmsg gaps as they come; write/writev gaps only on a socket
    (a log file written now and then is no send gap), and none once the fd is closed (what it was is unknown)."""
    number = r.arg & 0xFFFFFFFF
    if number not in FD_WRITES:
        return Interval("send_gap", detail=SYSCALL_NAMES.get(number, f"syscall {number}"), **base)
    path = paths(r.pid, r.arg >> 32)
    if path is None or not path.startswith(SOCKETS):
        return None
    return Interval("send_gap", detail=f"{SYSCALL_NAMES[number]} on {path}", **base)


def _cuda(func: int, calls: int, base: dict[str, int]) -> Interval | None:
    call = TIMED_CALLS[func] if func < len(TIMED_CALLS) else None
    if call is None:
        return None
    detail = call.symbol if calls <= 1 else f"{calls} allocation/free calls (last {call.symbol})"
    return Interval(call.kind, detail=detail, **base)


class Collector:
    """The BPF side: start(), watch(pid), poll() → new Intervals (also kept for `keep_s`), close().
    Processes of `cgroups` (and of their descendants) are watched too, learnt in the kernel at their first
    system call there and from cgroup.procs at refresh_threads(). The TIMED_CALLS named in `skip` are not hooked."""

    def __init__(self, libraries: LibrarySet, *, port: int = 0, thresholds: Thresholds = DEFAULT_THRESHOLDS,
                 keep_s: float = 120.0, comm: str = "", sample_hz: float = 199.0, cgroups: tuple[Cgroup, ...] = (),
                 send_stalls: bool = True, skip: frozenset[str] = frozenset()):
        self.libraries, self.port, self.thresholds, self.comm = libraries, port, thresholds, comm
        self.cgroups = cgroups
        self.want_send_stalls = send_stalls
        self.skip = skip  # timed calls not hooked (bpf.covered_calls: timed by their driver counterpart)
        self.send_stalls = False  # hooked: wanted and the kernel has sock:sock_send_length (set at start)
        self.sample_hz = sample_hz
        self.cuda_samples = CudaSamples(sample_hz, symbol=self._symbol)
        self.sampling = False
        self.keep_ns = int(keep_s * 1e9)
        self.intervals: deque[Interval] = deque()
        self.attached: list[str] = []
        self.pids: set[int] = set()
        self._bpf: Any = None
        self._pending: list[Interval] = []

    def start(self) -> None:
        preflight()
        from bcc import BPF

        try:
            self.send_stalls = self.want_send_stalls and all(has_tracepoint(*tp) for tp in SEND_STALL_TRACEPOINTS)
            self._bpf = BPF(text=build_text(self.thresholds, self.port, comm=self.comm, cgroups=bool(self.cgroups),
                                            send_length=self.send_stalls).encode())
        except Exception as exc:  # BCC raises bare Exception
            raise ProbeError(f"attribution probe: the BPF program did not load: {str(exc)[:500]}") from exc
        for i, call in enumerate(TIMED_CALLS):
            path = self.libraries.path(call.library)
            if not path or call.symbol in self.skip:
                continue
            try:
                self._bpf.attach_uprobe(name=path.encode(), sym=call.symbol.encode(), fn_name=f"at_enter_{i}".encode())
                self._bpf.attach_uretprobe(name=path.encode(), sym=call.symbol.encode(),
                                           fn_name=f"at_leave_{i}".encode())
                self.attached.append(call.symbol)
            except Exception:  # noqa: BLE001 - a symbol this library lacks
                log.warning("attribution probe: %s not found in %s", call.symbol, path)
        if self.sample_hz > 0:
            self._start_sampling()
        self._bpf[b"records"].open_ring_buffer(self._on_record)
        if self.cgroups:
            self.refresh_threads()

    def _start_sampling(self) -> None:
        from bcc import PerfSWConfig, PerfType

        try:
            self._bpf.attach_perf_event(ev_type=PerfType.SOFTWARE, ev_config=PerfSWConfig.CPU_CLOCK,
                                        fn_name=b"at_sample", sample_freq=int(self.sample_hz))
            self.sampling = True
        except Exception as exc:  # noqa: BLE001 - no perf events: on-CPU time in the driver counts as compute
            log.warning("attribution probe: no on-CPU sampling (%s)", exc)

    def _symbol(self, pid: int, ip: int) -> str:
        try:
            return str(self._bpf.sym(ip, pid, show_module=False, show_offset=False).decode(errors="replace"))
        except Exception:  # noqa: BLE001 - a stripped library: the module alone
            return ""

    def _on_record(self, _ctx: Any, data: Any, _size: int) -> None:
        r = ctypes.cast(data, ctypes.POINTER(Record)).contents
        if r.kind == SAMPLE:
            self.cuda_samples.feed(r.start_ns, r.pid, r.tid, (r.arg, *r.frames))
            return
        interval = to_interval(r)
        if interval is not None:
            self._pending.append(interval)

    def watch(self, pid: int) -> None:
        """Follow process pid and its threads (the program learns new threads at their first system call)."""
        self.pids.add(pid)
        table = self._bpf[b"watched_pids"]
        table[table.Key(pid)] = table.Leaf(1)
        self.refresh_threads()

    def refresh_threads(self, proc: str = "/proc") -> None:
        """Learn the threads of the watched processes from /proc; with cgroups, first their directories (those
        made since included) and the processes in them."""
        if self.cgroups:
            ids = self._bpf[b"watched_cgroups"]
            for cgroup in self.cgroups:
                for cgid in cgroup.ids():
                    ids[ids.Key(cgid)] = ids.Leaf(1)
            table = self._bpf[b"watched_pids"]
            for pid in set().union(*(c.pids() for c in self.cgroups)) - self.pids:
                table[table.Key(pid)] = table.Leaf(1)
            self.pids |= self.serving_pids()
        tids = self._bpf[b"watched_tids"]
        for pid in self.pids:
            for tid in _threads(pid, proc):
                tids[tids.Key(tid)] = tids.Leaf(pid)

    def serving_pids(self) -> set[int]:
        """The watched processes: those given by pid and those the kernel learnt in a watched cgroup."""
        if not self.cgroups:
            return set(self.pids)
        return self.pids | {int(k.value) for k in self._bpf[b"watched_pids"].keys()}

    def poll(self, timeout_ms: int = 0) -> list[Interval]:
        self._bpf.ring_buffer_poll(timeout_ms)
        new, self._pending = self._pending + self.cuda_samples.closed(), []
        self.intervals.extend(new)
        if self.intervals:
            horizon = self.intervals[-1].end_ns - self.keep_ns
            while self.intervals and self.intervals[0].end_ns < horizon:
                self.intervals.popleft()
        return new

    def open_bursts(self) -> list[Interval]:
        """Allocation/free bursts, fault bursts and send-queue stalls still open in the kernel maps (their end is
        not yet known to be final)."""
        found = []
        for key, b in self._bpf[b"bursts"].items():
            if b.end - b.start >= self.thresholds.cuda_ns:
                interval = _cuda(b.func, b.calls, {"start_ns": b.start, "end_ns": b.end, "tid": int(key.value)})
                if interval is not None:
                    found.append(interval)
        t = self.thresholds
        if self.send_stalls:
            now = time.monotonic_ns()
            for s in self._bpf[b"send_full"].values():
                if now - s.since >= t.send_stall_ns:
                    found.append(Interval("send_stall", int(s.since), now, int(s.tgid), int(s.tid),
                                          "TCP send queue full (open)"))
        for key, f in self._bpf[b"fault_burst"].items():
            if f.count >= t.fault_min and f.end - f.start >= t.fault_ns:
                found.append(Interval("faults", int(f.start), int(f.end), 0, int(key.value),
                                      f"{int(f.count)} page faults"))
        return found

    def open_oncpu(self, now_ns: int | None = None) -> list[Interval]:
        """The serving threads' on-CPU spans still open in the kernel map, the slice running now included."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        tgids = {int(k.value): int(v.value) for k, v in self._bpf[b"watched_tids"].items()}
        running = {int(k.value): int(v.value) for k, v in self._bpf[b"switched_in"].items()}
        found = []
        for key, span in self._bpf[b"oncpu"].items():
            tid = int(key.value)
            start, end, count = int(span.start), int(span.end), int(span.count)
            if tid in running and running[tid] <= end + self.thresholds.oncpu_gap_ns:
                del running[tid]
                end, count = now, count + 1
            found.append(Interval("oncpu", start, end, tgids.get(tid, 0), tid, f"{count} slices (open)"))
        found += [Interval("oncpu", since, now, tgids.get(tid, 0), tid, "running") for tid, since in running.items()]
        return [i for i in found if i.end_ns - i.start_ns >= self.thresholds.oncpu_ns] + self.cuda_samples.open()

    def page_faults(self) -> dict[int, int]:
        table = self._bpf[b"faults"]
        return {int(k.value): int(v.value) for k, v in table.items()}

    def lost(self) -> int:
        table = self._bpf[b"lost"]
        return int(sum(table[table.Key(0)]))

    def close(self) -> None:
        if self._bpf is not None:
            self._bpf.cleanup()
            self._bpf = None


def _threads(pid: int, proc: str) -> Iterable[int]:
    try:
        return [int(t) for t in os.listdir(Path(proc, str(pid), "task"))]
    except OSError:
        return []
