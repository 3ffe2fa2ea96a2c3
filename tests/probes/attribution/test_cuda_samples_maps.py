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
