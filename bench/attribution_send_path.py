"""Cost of the attribution probe's cgroup selection and send-queue stall hooks on a serving thread's sends.

A watched sender (a Python child) makes many small TCP sends over loopback to a reader child; ns per send, best of
`--repeats`, under three programs, in interleaved rounds (ABCCBA...) in one run:
  none: no program loaded;
  base: the attribution program as before h14c (no cgroup lookup, no sock:sock_send_length, no tcp:tcp_probe);
  noport: the same with a cgroup watched (the lookup on every unwatched system call) and send-queue stalls
          (sock:sock_send_length), no port (so no tcp:tcp_probe);
  new:  as noport, with the reader's port as the serving port (tcp:tcp_probe on every data segment).
The kernel's BPF statistics (kernel.bpf_stats_enabled, on for the run and restored) give each hooked program's
own run time per invocation: sys_enter (where the cgroup lookup is), sock_send_length and tcp_probe.
Needs root and BPF. Run: .venv/bin/python bench/attribution_send_path.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from gpuslo.probes.attribution.cgroups import Cgroup, cgroup2_mount
from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.ebpf.libraries import LibrarySet
from gpuslo.probes.ebpf.probe import _fdinfo_stats

STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
PROGRAMS = ("tracepoint__raw_syscalls__sys_enter", "tracepoint__sock__sock_send_length", "tracepoint__tcp__tcp_probe")

READER = r"""
import socket, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    while conn.recv(1 << 20):
        pass
    conn.close()
"""
SENDER = r"""
import socket, sys, time
port, sends, repeats = (int(a) for a in sys.argv[1:4])
print("ready", flush=True)
for _ in range(repeats):
    sys.stdin.readline()
    s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = time.perf_counter_ns()
    for _ in range(sends):
        s.send(b"x" * 64)
    print((time.perf_counter_ns() - t) / sends, flush=True)
    s.close()
"""


def per_send(port: int, sends: int, repeats: int, collector: Collector | None) -> float:
    child = subprocess.Popen([sys.executable, "-c", SENDER, str(port), str(sends), str(repeats)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    if collector is not None:
        collector.watch(child.pid)
    best = float("inf")
    for _ in range(repeats):
        child.stdin.write("go\n")
        child.stdin.flush()
        best = min(best, float(child.stdout.readline()))
    child.wait(30)
    child.stdin.close()
    child.stdout.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sends", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reader = subprocess.Popen([sys.executable, "-c", READER], stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None
    port = int(reader.stdout.readline())
    root = cgroup2_mount()
    cgroup = None
    if root is not None:
        cgroup = root / f"gpuslo-bench-{os.getpid()}"
        cgroup.mkdir()
    results: dict[str, list[float]] = {"none": [], "base": [], "noport": [], "new": []}
    prog: dict[tuple[str, str], list[float]] = {}
    stats_before = STATS_SYSCTL.read_text().strip()
    STATS_SYSCTL.write_text("1\n")
    order = ["none", "base", "noport", "new"]
    try:
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                collector = None
                if name == "base":
                    collector = Collector(LibrarySet(), port=port, sample_hz=0, send_stalls=False)
                    collector.start()
                elif name in ("noport", "new"):
                    cgroups = (Cgroup(Path(cgroup)),) if cgroup is not None else ()
                    collector = Collector(LibrarySet(), port=port if name == "new" else 0, sample_hz=0,
                                         cgroups=cgroups)
                    collector.start()
                try:
                    results[name].append(per_send(port, args.sends, args.repeats, collector))
                    if collector is not None:
                        for func, fn in collector._bpf.funcs.items():
                            if func.decode() in PROGRAMS:
                                st = _fdinfo_stats(fn.fd)
                                prog.setdefault((name, func.decode()), []).append(st.run_time_ns / max(st.runs, 1))
                finally:
                    if collector is not None:
                        collector.close()
    finally:
        reader.kill()
        reader.wait()
        if reader.stdout is not None:
            reader.stdout.close()
        if cgroup is not None:
            cgroup.rmdir()
        STATS_SYSCTL.write_text(f"{stats_before}\n")
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in results.items():
        print(f"{k:6s} ns/send per round: {', '.join(f'{x:.0f}' for x in v)}  median {med[k]:.0f}")
    for (name, func), v in sorted(prog.items()):
        print(f"{name:6s} {func}: {statistics.median(v):.0f} ns per run (median of rounds)")
    print(f"new/base {med['new'] / med['base']:.3f}  noport/base {med['noport'] / med['base']:.3f}  "
          f"base/none {med['base'] / med['none']:.3f}  new/none {med['new'] / med['none']:.3f}")


if __name__ == "__main__":
    main()
