"""The real attribution BPF program, loaded with BCC, watching a real process: each signal crosses the ring
buffer as an interval only when it is above its threshold, and only for the watched process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bpf_support import requires_bpf

from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.ebpf.libraries import LibrarySet

CHILD = r"""
import ctypes, os, socket, sys, time
ctypes.CDLL(None).prctl(15, b"gs-engine", 0, 0, 0)
os.sched_setaffinity(0, {0})
a, b = socket.socketpair()
print("ready", flush=True); sys.stdin.readline()
a.send(b"1"); time.sleep(0.001); a.send(b"2")     # 1 ms apart: no record
time.sleep(0.15); a.send(b"3")                    # a 150 ms send gap
with open(sys.argv[1], "wb") as f:                # one long write + fsync: long system calls
    os.write(f.fileno(), os.urandom(1 << 20) * 64); os.fsync(f.fileno())
print("busy", flush=True)
t = time.monotonic()
while time.monotonic() - t < 0.8: pass            # busy on CPU 0: the hog takes the CPU from it
print("done", flush=True)
"""
HOG = ("import os, sys, time\nos.sched_setaffinity(0, {0})\nos.setpriority(os.PRIO_PROCESS, 0, -20)\n"
       "print('ready', flush=True)\nsys.stdin.readline()\n"
       "t = time.monotonic()\nwhile time.monotonic() - t < 0.25: pass\n")


@requires_bpf
def test_runnable_send_gap_syscalls_and_a_cuda_burst(tmp_path, fake_build, app_runner):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "storm")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    collector = Collector(LibrarySet(cuda=str(fake_build.lib)), comm="gs-engine")
    collector.start()
    try:
        collector.watch(child.pid)
        os.setpriority(os.PRIO_PROCESS, child.pid, 19)
        # The hog moves to CPU 0 first (a migration preempts too), then waits to be let loose.
        hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert hog.stdout.readline() == "ready\n"
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "busy\n"
        hog.stdin.write("go\n")
        hog.stdin.flush()
        assert child.stdout.readline() == "done\n"
        child.wait(10)
        hog.wait(10)
        for pipe in (child.stdin, child.stdout, hog.stdin, hog.stdout):
            pipe.close()
        # 3000 cuMemAlloc_v2 calls in a row: one burst of allocation calls, not 3000 records
        app = app_runner.start("loop:3000:64")
        collector.watch(app.pid)
        app_runner.finish(app)
        time.sleep(0.1)
        found = collector.poll(100) + collector.open_oncpu()  # the child's last on-CPU span stays open
        bursts = collector.open_bursts()
    finally:
        collector.close()
    mine = [i for i in found if i.pid == child.pid]
    gaps = [i for i in mine if i.kind == "send_gap"]
    assert len(gaps) == 1 and 149 <= gaps[0].duration_ms < 300, [i.duration_ms for i in gaps]
    assert {"write", "fsync"} <= {i.detail for i in mine if i.kind == "syscall"}
    # nothing under the thresholds crossed the ring buffer (on-CPU spans, fault bursts from 1 ms, runnable 0.5)
    floor = {"oncpu": 1, "faults": 1, "runnable": 0.5}
    assert all(i.duration_ms >= floor.get(i.kind, 2) for i in mine)
    assert sum(i.duration_ms for i in mine if i.kind == "oncpu") >= 300  # most of the 0.8 s busy loop
    runnable = [i for i in mine if i.kind == "runnable"]
    # The hog (nice -20 on the child's CPU) starves it for ~250 ms. `other_pid` is the task that preempted it
    # first; on this shared machine that can be another task than the hog, so only the interval is asserted.
    assert max(i.duration_ms for i in runnable) > 150, sorted(round(i.duration_ms) for i in runnable)[-5:]
    burst = [i for i in found + bursts if i.kind == "cuda_alloc" and i.tid == app.pid]
    # Calls less than 1 ms apart are one burst; on this shared machine a preemption can split it.
    calls = [int(b.detail.split()[0]) if b.detail[0].isdigit() else 1 for b in burst]
    assert sum(calls) <= 3000 and len(burst) <= 5 and max(calls) >= 300, [b.detail for b in burst]
    assert not [i for i in found if i.pid not in (child.pid, app.pid, 0)]  # other processes are not watched
