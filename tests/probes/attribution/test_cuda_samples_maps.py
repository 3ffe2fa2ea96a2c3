"""CudaSamples reads a process's maps once, finds a frame's library by bisection, and reads them again after a
miss at most once per MAPS_REFRESH_S (a frame outside every mapping must not re-read the file at each sample)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuslo.probes.attribution import samples
from gpuslo.probes.attribution.samples import CudaSamples

LIBC = "7f0000000000-7f0000100000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
LIBCUDA = "7f1000000000-7f1000200000 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libcuda.so.580\n"


def _proc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "42").mkdir(exist_ok=True)
    (tmp_path / "42" / "maps").write_text(text)
    return tmp_path


def test_a_frame_is_found_in_its_mapping_and_a_miss_rereads_at_most_once_per_refresh(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch):
    clock = [100.0]
    monkeypatch.setattr(samples.time, "monotonic", lambda: clock[0])
    reads = []
    real = samples._maps
    monkeypatch.setattr(samples, "_maps", lambda pid, proc: reads.append(pid) or real(pid, proc))
    proc = _proc(tmp_path, LIBC)
    cuda = CudaSamples(199.0, proc=str(proc))
    assert cuda.module(42, 0x7F0000000010) == "/usr/lib/libc.so.6"
    assert cuda.module(42, 0x7F0000100000) == ""  # one past the end: a miss, inside the refresh interval
    assert cuda.module(42, 0x12345) == ""
    assert reads == [42]
    _proc(tmp_path, LIBC + LIBCUDA)  # libcuda is loaded later
    assert cuda.module(42, 0x7F1000000100) == ""  # not looked for again yet
    clock[0] += samples.MAPS_REFRESH_S
    assert cuda.module(42, 0x7F1000000100) == "/usr/lib/x86_64-linux-gnu/libcuda.so.580"
    assert reads == [42, 42]


def test_a_process_that_is_gone_has_no_mappings(tmp_path: Path):
    assert CudaSamples(199.0, proc=str(tmp_path)).module(7, 0x7F0000000010) == ""


def test_a_collector_without_sampling_can_be_made():
    """sample_hz=0 turns the perf-event sampler off (the overhead runs toggle it); the sample spans stay empty."""
    from gpuslo.probes.attribution.collector import Collector
    from gpuslo.probes.ebpf.libraries import LibrarySet

    collector = Collector(LibrarySet(), sample_hz=0)
    assert collector.cuda_samples.period_ns == 0
    assert collector.cuda_samples.open() == [] and collector.cuda_samples.closed() == []


LIBNVRTC = "7f2000000000-7f2004000000 r-xp 00000000 08:01 3 /usr/local/lib/python3.12/nvidia/cu13/lib/libnvrtc.so.13\n"
MS = 1_000_000


def test_samples_in_a_run_time_kernel_compiler_are_a_jit_span_apart_from_the_driver(tmp_path: Path):
    """A thread that spins in libcuda, then compiles in libnvrtc: two spans, each of its own kind, and the
    kept samples say which library every stretch of on-CPU time was in."""
    proc = _proc(tmp_path, LIBC + LIBCUDA + LIBNVRTC)
    cuda = CudaSamples(200.0, proc=str(proc))  # 5 ms apart
    for i in range(4):
        cuda.feed(1000 * MS + i * 5 * MS, 42, 43, (0x7F1000000100,))
    for i in range(6):  # the compiler's own frame first, then one under libc's malloc (frame 1 in libnvrtc)
        ip = (0x7F0000000010, 0x7F2000000200) if i % 2 else (0x7F2000000100,)
        cuda.feed(1020 * MS + i * 5 * MS, 42, 43, ip)
    cuda.feed(1060 * MS, 42, 43, (0x7F0000000010,))  # its own work: no span
    spans = cuda.closed() + cuda.open()
    assert [(s.kind, s.start_ns, s.end_ns) for s in spans] == [
        ("cuda_cpu", 1000 * MS - 2_500_000, 1015 * MS + 2_500_000),
        ("cuda_jit", 1020 * MS - 2_500_000, 1045 * MS + 2_500_000)]
    assert "compiling GPU kernels (libnvrtc.so.13)" in spans[1].detail
    assert (cuda.in_cuda, cuda.in_jit, cuda.samples) == (4, 6, 11)
    assert cuda.modules_between(1018 * MS, 1100 * MS) == {"libnvrtc.so.13": 3, "libc.so.6": 4}
    assert cuda.modules_between(0, 2000 * MS, tids=[7]) == {}


def test_jit_time_is_the_drivers_whatever_the_gpu_was_doing_and_the_rest_stays_compute():
    from gpuslo.probes.attribution.attribute import attribute
    from gpuslo.probes.attribution.signals import GpuSample, Interval

    intervals = [Interval("send_gap", 0, 300 * MS, 1, 2, "sendto"),
                 Interval("oncpu", 0, 300 * MS, 1, 2, "3 slices"),
                 Interval("cuda_jit", 20 * MS, 220 * MS, 1, 2, "40 on-CPU samples compiling GPU kernels (x)"),
                 Interval("cuda_cpu", 230 * MS, 260 * MS, 1, 2, "6 on-CPU samples in the CUDA driver (y)")]
    busy = [GpuSample(t * MS, 0, 100.0, 0.99) for t in range(0, 300, 50)]
    a = attribute(0, 300 * MS, intervals, busy)
    assert (a.dominant, round(a.shares_ms["driver"]), round(a.shares_ms["gpu"]), round(a.shares_ms["compute"])) \
        == ("driver", 200, 30, 70)
    assert "compiling GPU kernels at run time" in a.evidence["driver"]
