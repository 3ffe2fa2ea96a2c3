"""The injected causes of the labelled stall-attribution run (scripts/gpu_stall_attribution.py), one per layer.

    CpuHog(cpu)            a SCHED_FIFO busy loop pinned to the serving process's CPU: 300 ms on, 700 ms off
    DelayProxy(upstream)   a TCP proxy that holds the server's bytes for 300 ms once a second (tc is not on the
                           GPU image, so this is the network delay)
    GpuContender()         another process running bf16 matrix products back to back, in bursts
    the kernel and allocator causes are the LLM server's own /control/kernel and /control/fragment
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

HOG = r"""
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
try:  # real-time where the machine allows it; the GPU VM refuses SCHED_FIFO (EPERM), then the highest nice
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
except PermissionError:
    os.setpriority(os.PRIO_PROCESS, 0, -20)
print("ready", flush=True)
while True:
    t = time.monotonic()
    while time.monotonic() - t < float(sys.argv[2]):
        pass
    time.sleep(float(sys.argv[3]))
"""

CONTENDER = r"""
import sys, time, torch
a = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
b = torch.randn(16384, 16384, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
on, off = float(sys.argv[1]), float(sys.argv[2])
while True:
    t = time.monotonic()
    while time.monotonic() - t < on:
        for _ in range(8):
            c = a @ b
        torch.cuda.synchronize()
    time.sleep(off)
"""


class Child:
    """A helper process that prints `ready` when it is doing its work; stop() ends it."""

    def __init__(self, code: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.ready = self.proc.stdout.readline().strip() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def cpu_hog(cpu: int, on_s: float = 0.3, off_s: float = 0.7) -> Child:
    return Child(HOG, str(cpu), str(on_s), str(off_s))


def gpu_contender(on_s: float = 0.6, off_s: float = 0.6) -> Child:
    return Child(CONTENDER, str(on_s), str(off_s))


def pin_threads(pid: int, cpus: set[int], nice: int = 0) -> int:
    """Pin every thread of pid to cpus at this nice value (19 while the hog runs: CFS then gives the hog ~99.9 %
    of the CPU, so its bursts starve the engine thread, as SCHED_FIFO would); the number of threads set."""
    count = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
            count += 1
        except OSError:
            pass
    return count


class DelayProxy(threading.Thread):
    """127.0.0.1:port → upstream; the server-to-client direction is held for `hold_s` once every `every_s`."""

    def __init__(self, upstream_port: int, hold_s: float = 0.3, every_s: float = 1.0):
        super().__init__(name="delay-proxy", daemon=True)
        self.upstream, self.hold_s, self.every_s = upstream_port, hold_s, every_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.holds: list[tuple[int, int]] = []  # wall ns

    def run(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
        last = time.monotonic()
        try:
            while data := src.recv(65536):
                if delayed and time.monotonic() - last >= self.every_s:
                    start = time.time_ns()
                    time.sleep(self.hold_s)
                    self.holds.append((start, time.time_ns()))
                    last = time.monotonic()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
