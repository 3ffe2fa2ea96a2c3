"""What the attribution probe costs, measured directly: each loaded BPF program's runs and run time (the kernel's
bpf_stats, read from /proc/self/fdinfo of its fd), the cost of a uprobe / uretprobe trap outside the program, and
the extra cost a system call pays while raw_syscalls tracepoints are attached (both from tight loops).

Programs' run_time_ns is the time inside the program only: a uprobe hit also pays the breakpoint trap and a
uretprobe a second one on return; a system call pays the tracing slow path. Those come from the microbenches.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuslo.engine.errors import ProbeError

STATS = Path("/proc/sys/kernel/bpf_stats_enabled")
NOOP = b"int at_noop(void *ctx) { return 0; }\n"


@dataclass(frozen=True)
class ProgramStats:
    """One BPF program's run count and time inside it (ns), as the kernel keeps them with bpf_stats on."""

    name: str
    run_cnt: int
    run_time_ns: int

    def minus(self, before: ProgramStats) -> ProgramStats:
        return ProgramStats(self.name, self.run_cnt - before.run_cnt, self.run_time_ns - before.run_time_ns)


@dataclass(frozen=True)
class TrapCost:
    """ns per call of a function: bare, with an empty uprobe on it, with an empty uprobe and uretprobe; and how
    many times the empty program ran in each probed setting, over all rounds (0 unless bpf_stats was on)."""

    symbol: str
    calls: int
    bare_ns: float
    uprobe_ns: float
    uprobe_uretprobe_ns: float
    uprobe_runs: int = 0
    pair_runs: int = 0

    @property
    def uprobe_trap_ns(self) -> float:
        return self.uprobe_ns - self.bare_ns

    @property
    def pair_trap_ns(self) -> float:
        return self.uprobe_uretprobe_ns - self.bare_ns


@contextmanager
def bpf_stats(path: Path = STATS) -> Iterator[None]:
    """kernel.bpf_stats_enabled=1 inside the block (the kernel counts runs only then), restored afterwards."""
    try:
        before = path.read_text().strip()
        path.write_text("1\n")
    except OSError as exc:
        raise ProbeError(f"bpf stats: cannot enable {path}: {exc}") from exc
    try:
        yield
    finally:
        path.write_text(before + "\n")


def fd_stats(fd: int, name: str, proc: str = "/proc/self") -> ProgramStats:
    """run_cnt and run_time_ns of the program behind fd (kernels 5.1 on list them in fdinfo)."""
    fields: dict[str, str] = {}
    try:
        for line in Path(proc, "fdinfo", str(fd)).read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError as exc:
        raise ProbeError(f"bpf stats: {proc}/fdinfo/{fd} ({name}): {exc}") from exc
    if "run_cnt" not in fields:
        raise ProbeError(f"bpf stats: fd {fd} ({name}) is not a BPF program with run statistics")
    return ProgramStats(name, int(fields["run_cnt"]), int(fields["run_time_ns"]))


def program_stats(bpf: Any) -> dict[str, ProgramStats]:
    """Every loaded program of a BCC BPF object, by function name."""
    return {name.decode(): fd_stats(fn.fd, name.decode()) for name, fn in bpf.funcs.items()}


def delta(after: Mapping[str, ProgramStats], before: Mapping[str, ProgramStats]) -> dict[str, ProgramStats]:
    """What each program did between two readings (a program loaded in between counts from zero)."""
    return {n: s.minus(before.get(n, ProgramStats(n, 0, 0))) for n, s in after.items()}


def _per_call(fn: Callable[[], Any], calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - t0) / calls


def trap_cost(library: str, symbol: str, call: Callable[[], Any], calls: int = 20_000, repeats: int = 5) -> TrapCost:
    """Times `call` (which calls `symbol` of `library` once) bare, under an empty uprobe, and under an empty
    uprobe and uretprobe, interleaved `repeats` times; the least ns per call of each setting (noise only adds).
    With bpf_stats on, it also counts the program's runs in each setting: the proof that each probe fired, which
    the times alone cannot give (a return probe adds well under 1 µs to a trap that one preemption outweighs)."""
    from bcc import BPF

    bpf = BPF(text=NOOP)
    best = {"bare": float("inf"), "uprobe": float("inf"), "pair": float("inf")}
    runs = {"uprobe": 0, "pair": 0}
    try:
        for _ in range(repeats):
            best["bare"] = min(best["bare"], _per_call(call, calls))
            bpf.attach_uprobe(name=library.encode(), sym=symbol.encode(), fn_name=b"at_noop")
            before = _noop_runs(bpf)
            best["uprobe"] = min(best["uprobe"], _per_call(call, calls))
            bpf.attach_uretprobe(name=library.encode(), sym=symbol.encode(), fn_name=b"at_noop")
            middle = _noop_runs(bpf)
            best["pair"] = min(best["pair"], _per_call(call, calls))
            runs["uprobe"] += middle - before
            runs["pair"] += _noop_runs(bpf) - middle
            for event in list(bpf.uprobe_fds):
                bpf.detach_uprobe_event(event)
    finally:
        bpf.cleanup()
    return TrapCost(symbol, calls, round(best["bare"], 1), round(best["uprobe"], 1), round(best["pair"], 1),
                    runs["uprobe"], runs["pair"])


def _noop_runs(bpf: Any) -> int:
    return program_stats(bpf)["at_noop"].run_cnt


def syscall_cost(calls: int = 100_000, repeats: int = 5) -> dict[str, float]:
    """ns per getppid() bare and with empty programs on raw_syscalls:sys_enter and sys_exit: the tracing slow
    path every system call of every process pays while the probe's raw_syscalls programs are attached (their own
    run time comes from program_stats)."""
    from bcc import BPF

    bpf = BPF(text=NOOP)
    bare = traced = float("inf")
    try:
        for _ in range(repeats):
            bare = min(bare, _per_call(os.getppid, calls))
            for tp in (b"raw_syscalls:sys_enter", b"raw_syscalls:sys_exit"):
                bpf.attach_tracepoint(tp=tp, fn_name=b"at_noop")
            traced = min(traced, _per_call(os.getppid, calls))
            for tp in (b"raw_syscalls:sys_enter", b"raw_syscalls:sys_exit"):
                bpf.detach_tracepoint(tp=tp)
        runs = program_stats(bpf)
    finally:
        bpf.cleanup()
    return {"bare_ns": round(bare, 1), "traced_ns": round(traced, 1), "slow_path_ns": round(traced - bare, 1),
            "noop_runs": runs["at_noop"].run_cnt}


COUNTER = r"""
BPF_HASH(syscalls, u32, u64, 4096);
TRACEPOINT_PROBE(raw_syscalls, sys_enter)
{
    u64 id = bpf_get_current_pid_tgid();
    if ((id >> 32) != AT_PID)
        return 0;
    u32 tid = (u32)id;
    syscalls.increment(tid);
    return 0;
}
"""


@contextmanager
def thread_syscalls(pid: int) -> Iterator[dict[int, int]]:
    """System calls per thread of process pid inside the block (filled in when it ends)."""
    from bcc import BPF

    counts: dict[int, int] = {}
    bpf = BPF(text=f"#define AT_PID {int(pid)}\n{COUNTER}".encode())
    try:
        yield counts
        counts.update({int(k.value): int(v.value) for k, v in bpf[b"syscalls"].items()})
    finally:
        bpf.cleanup()


def thread_switches(pid: int, proc: str = "/proc") -> dict[int, tuple[str, int, int]]:
    """Per thread of pid: its name and voluntary / involuntary context switches so far."""
    found = {}
    for task in Path(proc, str(pid), "task").iterdir():
        try:
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        found[int(task.name)] = (status["Name"].strip(), int(status["voluntary_ctxt_switches"]),
                                 int(status["nonvoluntary_ctxt_switches"]))
    return found


def thread_cpu_s(pid: int | None = None, proc: str = "/proc") -> dict[int, float]:
    """CPU seconds (user + system) so far per thread id of pid (this process by default)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for task in Path(proc, str(pid or os.getpid()), "task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def libc_call(library: str, symbol: str) -> Callable[[], Any]:
    """A no-argument ctypes call of symbol in library (for trap_cost); the symbol must take no arguments or one
    int pointer (cuDriverGetVersion)."""
    fn = getattr(ctypes.CDLL(library), symbol)
    out = ctypes.c_int(0)
    ref = ctypes.byref(out)
    return lambda: fn(ref)
