"""The eBPF tests' stand-in CUDA library and its runs; the skip marker for root and working BPF (bpf_support)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.ebpf.libraries import LibrarySet

HERE = Path(__file__).parent
TIB = 1 << 40


@dataclass(frozen=True)
class FakeBuild:
    """The compiled stand-in library, the program linked to it, and a copy named like the real driver."""

    lib: Path
    app: Path
    libcuda_copy: Path


@dataclass(frozen=True)
class AppRun:
    """One finished run of the fake program: its pid and the result lines it printed."""

    pid: int
    lines: tuple[str, ...]


class AppRunner:
    """Starts the program paused on stdin, lets the test hook its pid, then releases it."""

    def __init__(self, app: Path):
        self.app = app

    def start(self, *calls: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen([str(self.app), *calls], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    @staticmethod
    def finish(proc: subprocess.Popen[str], stdin: str = "go\n") -> AppRun:
        out, _ = proc.communicate(stdin, timeout=30)
        assert proc.returncode == 0, out
        return AppRun(proc.pid, tuple(out.splitlines()))


@dataclass(frozen=True)
class Drained:
    """What the collector recorded while a child ran one step: the records, the child's reply line, and the
    monotonic clock around the step."""

    found: list
    reply: str
    started_ns: int
    ended_ns: int


def drain_one_step(collector: Collector, child: subprocess.Popen[str], *, open_oncpu: bool = False) -> Drained:
    """As the agent does: read the ring buffer every 0.1 s in a thread while the (watched, paused) child is told
    "go" and runs until it prints its reply line; drain 0.2 s more, then let the child exit."""
    found: list = []
    done = threading.Event()
    poller = threading.Thread(target=lambda: [found.extend(collector.poll(100)) for _ in iter(done.is_set, True)])
    started = time.monotonic_ns()
    poller.start()
    child.stdin.write("go\n")
    child.stdin.flush()
    reply = child.stdout.readline()
    ended = time.monotonic_ns()
    time.sleep(0.2)
    done.set()
    poller.join(5)
    if open_oncpu:
        found += collector.open_oncpu()
    child.wait(10)
    child.stdin.close()
    child.stdout.close()
    return Drained(found, reply, started, ended)


@dataclass(frozen=True)
class WatchedStep:
    """A child's one step as the attribution collector saw it: what was drained, the child's pid, the collector."""

    drained: Drained
    pid: int
    collector: Collector


def watch_child_step(cuda_lib: Path, code: str, *argv: str, open_oncpu: bool = False) -> WatchedStep:
    """Start `python -c code argv...` (it prints "ready", waits for "go", prints its reply), watch it with a
    collector on the stand-in libcuda (comm gs-engine), drain its one step, close the collector."""
    child = subprocess.Popen([sys.executable, "-c", code, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    collector = Collector(LibrarySet(cuda=str(cuda_lib)), comm="gs-engine")
    collector.start()
    try:
        collector.watch(child.pid)
        drained = drain_one_step(collector, child, open_oncpu=open_oncpu)
    finally:
        collector.close()
    return WatchedStep(drained, child.pid, collector)
