"""On-CPU sampling (a real cpu-clock perf event and the real BPF program): time a serving thread spends on a CPU
inside a library named libcuda.so.1 becomes a `cuda_cpu` span, which the split gives to the GPU while the device
was busy and to the driver when it was not; the thread's own work around it stays compute."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from bpf_support import requires_bpf
from ebpf_support import watch_child_step

from gpuslo.probes.attribution.attribute import attribute
from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.attribution.signals import GpuSample

SPIN_C = r"""
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
void cuLaunchKernel_spin(double seconds) { double t = now(); while (now() - t < seconds) ; }
"""
CHILD = r"""
import ctypes, sys, time
ctypes.CDLL(None).prctl(15, b"gs-engine", 0, 0, 0)
lib = ctypes.CDLL(sys.argv[1])
lib.cuLaunchKernel_spin.argtypes = [ctypes.c_double]
print("ready", flush=True); sys.stdin.readline()
t = time.monotonic()
while time.monotonic() - t < 0.1: pass          # its own work
a = time.monotonic_ns()
lib.cuLaunchKernel_spin(0.4)                    # on CPU inside "libcuda"
b = time.monotonic_ns()
t = time.monotonic()
while time.monotonic() - t < 0.1: pass
print(a, b, flush=True)
"""


@dataclass(frozen=True)
class SpinRun:
    """What the probe saw of a watched child that spun 400 ms inside a library: the intervals, the child's pid,
    the spin's own [a, b], the run's bounds and the collector (closed; its samples stay with it)."""

    found: list
    pid: int
    a: int
    b: int
    started: int
    ended: int
    collector: Collector


def _spin_in_library(tmp_path, fake_build, source_text: str, child_code: str, lib_name: str) -> SpinRun:
    """Build `lib_name` from `source_text`, run `child_code` watched by the collector (as the agent does: the ring
    buffer read every 0.1 s while the process and its maps are there) and return what it recorded."""
    source = tmp_path / "spin.c"
    source.write_text(source_text)
    lib = tmp_path / lib_name
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    step = watch_child_step(fake_build.lib, child_code, str(lib), open_oncpu=True)
    assert step.collector.sampling
    drained = step.drained
    a, b = map(int, drained.reply.split())
    return SpinRun(drained.found, step.pid, a, b, drained.started_ns, drained.ended_ns, step.collector)


@requires_bpf
def test_on_cpu_time_inside_the_cuda_library_is_the_gpus_when_busy(tmp_path, fake_build):
    run = _spin_in_library(tmp_path, fake_build, SPIN_C, CHILD, "libcuda.so.1")
    found, a, b, started, ended, collector = run.found, run.a, run.b, run.started, run.ended, run.collector
    spans = [i for i in found if i.kind == "cuda_cpu" and i.pid == run.pid]
    inside = sum(min(i.end_ns, b) - max(i.start_ns, a) for i in spans if i.end_ns > a and i.start_ns < b) / 1e6
    # 400 ms spun inside the library; on this shared machine (load 10 on 2 CPUs) most of it the thread can wait
    # for a CPU (runnable, no sample): at least one 5 ms sample period
    assert inside >= 5, [(i.duration_ms, i.detail) for i in spans]
    assert all("libcuda.so.1" in i.detail for i in spans)
    assert collector.cuda_samples.in_cuda < collector.cuda_samples.samples  # its own work was sampled too
    busy = [GpuSample(t, 0, 99.0, 0.99) for t in range(started, ended, 50_000_000)]
    idle = [GpuSample(t, 0, 0.0, 0.0) for t in range(started, ended, 50_000_000)]
    on_busy = attribute(a - 50_000_000, b + 50_000_000, found, busy, server_observed=False)
    on_idle = attribute(a - 50_000_000, b + 50_000_000, found, idle, server_observed=False)
    report = (dict(on_busy.shares_ms), dict(on_idle.shares_ms), dict(on_busy.evidence))
    assert on_busy.shares_ms["gpu"] >= 5 and on_busy.shares_ms["driver"] == 0, report
    assert on_idle.shares_ms["driver"] == on_busy.shares_ms["gpu"] and on_idle.shares_ms["gpu"] == 0, report
    assert on_busy.shares_ms["compute"] > 0 and "inside the CUDA driver" in on_busy.evidence["gpu"], report


JIT_C = r"""
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
void nvrtcCompileProgram_spin(double seconds) { double t = now(); while (now() - t < seconds) ; }
"""
JIT_CHILD = CHILD.replace("lib.cuLaunchKernel_spin", "lib.nvrtcCompileProgram_spin")


@requires_bpf
def test_on_cpu_time_in_a_run_time_kernel_compiler_is_the_drivers_not_compute(tmp_path, fake_build):
    """As the H200 engine thread that built a cuDNN attention plan with NVRTC at every token (h14d): 400 ms on a
    CPU inside a library named libnvrtc.so.13 is driver time, busy GPU or not; before h14d it was compute."""
    run = _spin_in_library(tmp_path, fake_build, JIT_C, JIT_CHILD, "libnvrtc.so.13")
    found, a, b, started, ended, collector = run.found, run.a, run.b, run.started, run.ended, run.collector
    spans = [i for i in found if i.kind == "cuda_jit" and i.pid == run.pid]
    inside = sum(min(i.end_ns, b) - max(i.start_ns, a) for i in spans if i.end_ns > a and i.start_ns < b) / 1e6
    assert inside >= 5, [(i.duration_ms, i.detail) for i in spans]
    assert all("libnvrtc.so.13" in i.detail for i in spans)
    assert not [i for i in found if i.kind == "cuda_cpu" and i.pid == run.pid]
    busy = [GpuSample(t, 0, 99.0, 0.99) for t in range(started, ended, 50_000_000)]
    result = attribute(a - 50_000_000, b + 50_000_000, found, busy, server_observed=False)
    report = (dict(result.shares_ms), dict(result.evidence))
    # the compile's spans are the driver's, except where the thread waited for a CPU (runnable claims first; the
    # spans are widened by half a sample period, and this 2-core machine is shared)
    shares = result.shares_ms
    assert shares["driver"] >= 5 and shares["driver"] + shares["scheduler"] >= inside - 1, report
    assert shares["gpu"] == 0, report
    assert "compiling GPU kernels at run time" in result.evidence["driver"], report
    assert result.shares_ms["compute"] > 0, report  # its own 200 ms around the compile stay compute
    modules = collector.cuda_samples.modules_between(a, b)  # the samples stay with the collector
    assert modules.get("libnvrtc.so.13", 0) >= 1, modules
