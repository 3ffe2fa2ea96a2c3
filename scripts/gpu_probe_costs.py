"""The attribution probe's cost per attachment, measured directly (h14e; used by scripts/gpu_issue14.py).

Over a timed serving run with the probe attached: each BPF program's runs and time inside it (kernel bpf_stats),
the uprobe / uretprobe trap cost and the system-call tracing slow path from tight loops on the same machine, the
serving process's system calls and context switches per thread, and the CPU time of the probe's own threads.
Gives one row per program: hits per token, ns per hit (program + trap), µs per token, share of a reference cost.

The client runs in a process of its own (ClientProc), so that the probe's Python threads (ring-buffer drain,
NVML) do not hold the GIL the client's token timestamps need.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_e2e import PY  # noqa: E402

from gpuslo.probes.attribution.bpf import TIMED_CALLS  # noqa: E402
from gpuslo.probes.attribution.costs import (  # noqa: E402
    ProgramStats,
    TrapCost,
    bpf_stats,
    delta,
    program_stats,
    syscall_cost,
    thread_cpu_s,
    thread_switches,
    thread_syscalls,
)

CLIENT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from gpu_probe_overhead import itl_block
url, cpus = sys.argv[2], sys.argv[3]
if cpus:
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
print("ready", flush=True)
for line in sys.stdin:
    requests, tokens = (int(v) for v in line.split())
    print(json.dumps(itl_block(url, requests, tokens)), flush=True)
"""


class ClientProc:
    """The streaming client in its own process: gaps(requests, tokens) → the inter-token gaps (ms)."""

    def __init__(self, url: str, cpus: set[int] | None = None) -> None:
        self.proc = subprocess.Popen([PY, "-c", CLIENT, str(Path(__file__).resolve().parent), url,
                                      ",".join(str(c) for c in sorted(cpus or ()))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    def gaps(self, requests: int, tokens: int) -> list[float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{requests} {tokens}\n")
        self.proc.stdin.flush()
        return [float(v) for v in json.loads(self.proc.stdout.readline())]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def _symbol(prog: str) -> str:
    """at_enter_6 → cuStreamSynchronize (enter), at_leave_6 → cuStreamSynchronize (return)."""
    for prefix, what in (("at_enter_", "uprobe"), ("at_leave_", "uretprobe")):
        if prog.startswith(prefix):
            return f"{TIMED_CALLS[int(prog[len(prefix):])].symbol} ({what})"
    return prog.removeprefix("tracepoint__").replace("__", ":")


def hits_by_symbol(spent: dict[str, ProgramStats]) -> dict[str, int]:
    return {TIMED_CALLS[int(n[len("at_enter_"):])].symbol: s.run_cnt for n, s in spent.items()
            if n.startswith("at_enter_")}


def table(spent: dict[str, ProgramStats], units: int, trap: TrapCost | None, sys_slow_ns: float,
          serving_syscalls: int, reference_us: float) -> list[dict[str, Any]]:
    """One row per program with runs: hits per unit (token or step), ns per hit inside the program and outside it
    (the trap, the syscall slow path), µs per unit, and share of reference_us. The raw_syscalls rows count every
    process's calls; `serving_us_per_unit` is the serving process's part."""
    rows = []
    for name, s in sorted(spent.items()):
        if s.run_cnt == 0:
            continue
        prog_ns = s.run_time_ns / s.run_cnt
        outside = 0.0
        if trap is not None and name.startswith("at_enter_"):
            outside = trap.uprobe_trap_ns
        elif trap is not None and name.startswith("at_leave_"):
            outside = max(trap.pair_trap_ns - trap.uprobe_trap_ns, 0.0)
        elif name == "tracepoint__raw_syscalls__sys_enter":
            outside = sys_slow_ns  # the slow path of enter and exit together, on the enter row
        per_unit = s.run_cnt / units
        us = per_unit * (prog_ns + outside) / 1000
        row: dict[str, Any] = {"program": _symbol(name), "hits_per_unit": round(per_unit, 2),
                               "prog_ns_per_hit": round(prog_ns, 1), "outside_ns_per_hit": round(outside, 1),
                               "us_per_unit": round(us, 2), "share_pct": round(100 * us / reference_us, 2)}
        if name.startswith("tracepoint__raw_syscalls"):
            serving = serving_syscalls / units * (prog_ns + outside) / 1000
            row["serving_us_per_unit"] = round(serving, 2)
        rows.append(row)
    return sorted(rows, key=lambda r: -r["us_per_unit"])


def measure(bpf: Any, run: Any, pid: int, reference_us: float, trap: TrapCost | None,
            sys_slow_ns: float) -> dict[str, Any]:
    """Runs run() → units done (tokens, steps) with bpf_stats on; the table, plus pid's system calls and
    context switches per unit (per thread name) and this process's threads' CPU time per second."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    with bpf_stats():
        before, sw0, cpu0, t0 = program_stats(bpf), thread_switches(pid), thread_cpu_s(), time.monotonic()
        with thread_syscalls(pid) as calls:
            units = run()
        spent = delta(program_stats(bpf), before)
        sw1, cpu1, wall = thread_switches(pid), thread_cpu_s(), time.monotonic() - t0
    units = max(units, 1)
    threads: dict[str, dict[str, float]] = {}
    for tid, (name, vol, inv) in sw1.items():
        v0, i0 = sw0.get(tid, (name, 0, 0))[1:]
        t = threads.setdefault(name, {"syscalls": 0.0, "voluntary": 0.0, "involuntary": 0.0})
        t["syscalls"] += calls.get(tid, 0) / units
        t["voluntary"] += (vol - v0) / units
        t["involuntary"] += (inv - i0) / units
    gone = sum(n for tid, n in calls.items() if tid not in sw1)  # threads that ended inside (a request's own)
    threads["(ended threads)"] = {"syscalls": gone / units, "voluntary": 0.0, "involuntary": 0.0}
    threads = {n: {k: round(v, 2) for k, v in t.items()} for n, t in threads.items() if any(t.values())}
    own = {names.get(tid, str(tid)): round((cpu1.get(tid, 0.0) - c) / wall, 4) for tid, c in cpu0.items()}
    rows = table(spent, units, trap, sys_slow_ns, sum(calls.values()), reference_us)
    return {"units": units, "wall_s": round(wall, 2), "rows": rows,
            "total_us_per_unit": round(sum(r["us_per_unit"] for r in rows), 2),
            "serving_process_per_unit": threads, "probe_threads_cpu_s_per_s": {k: v for k, v in own.items() if v},
            "hits_by_symbol": hits_by_symbol(spent)}


def syscall_slow_path() -> dict[str, float]:
    with bpf_stats():
        return syscall_cost()


def markdown(rows: list[dict[str, Any]], unit: str = "token") -> str:
    """The table as markdown (for the run log and the notes)."""
    out = [f"| program | hits/{unit} | ns/hit in program | ns/hit outside | µs/{unit} | share |",
           "|---|---|---|---|---|---|"]
    out += [f"| {r['program']} | {r['hits_per_unit']} | {r['prog_ns_per_hit']} | {r['outside_ns_per_hit']} | "
            f"{r['us_per_unit']} | {r['share_pct']} % |" for r in rows]
    return "\n".join(out)
