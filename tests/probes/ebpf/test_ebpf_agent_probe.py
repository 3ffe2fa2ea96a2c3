"""The eBPF probe as the agent loads it (`--probe ebpf:PATHS`), attached to a copy of the fake library."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from bpf_support import requires_bpf
from ebpf_support import TIB, AppRunner, FakeBuild

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.agent import ProbeSpec, load_probe
from gpuslo.probes.ebpf import EbpfAgentProbe
from gpuslo.probes.ebpf.agent_probe import EbpfProbeConfig
from gpuslo.probes.ebpf.functions import FUNCTIONS, LIBCUDA


def test_argument_is_a_comma_separated_list_of_paths():
    assert EbpfProbeConfig.parse(" /a/libcuda.so.1, /b/libcudart.so.13 ,").libraries == (
        "/a/libcuda.so.1", "/b/libcudart.so.13")
    assert EbpfProbeConfig.parse(None).libraries == ()


def test_agent_loads_it_by_name(fake_build: FakeBuild):
    probe = load_probe(ProbeSpec.parse(f"ebpf:{fake_build.libcuda_copy}"), "node-7")
    assert isinstance(probe, EbpfAgentProbe) and probe.name == "ebpf"
    assert probe.libraries().cuda == str(fake_build.libcuda_copy)
    assert [(j.name, j.interval_s) for j in probe.jobs()] == [("ebpf-ring", 0.5)]


def test_a_missing_library_path_is_a_probe_error(tmp_path):
    probe = load_probe(ProbeSpec.parse(f"ebpf:{tmp_path / 'libcuda.so.1'}"), "node-7")
    with pytest.raises(ProbeError, match="does not exist"):
        probe.start()


def test_poll_before_start_is_a_probe_error():
    with pytest.raises(ProbeError, match="not started"):
        EbpfAgentProbe(EbpfProbeConfig(), "node-7").poll()


@requires_bpf
def test_the_ring_job_reports_an_oom_in_another_process(fake_build: FakeBuild):
    probe = load_probe(ProbeSpec.parse(f"ebpf:{fake_build.libcuda_copy}"), "node-7")
    probe.start()
    try:
        driver_functions = [f.symbol for f in FUNCTIONS if f.library == LIBCUDA]
        assert [p.symbol for p in probe.probe.attached][:len(driver_functions)] == driver_functions
        code = ("import ctypes,sys; lib=ctypes.CDLL(sys.argv[1]); p=ctypes.c_uint64();"
                "print(lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(int(sys.argv[2]))))")
        run = subprocess.run([sys.executable, "-c", code, str(fake_build.libcuda_copy), str(2 * TIB)],
                             capture_output=True, text=True, check=True)
        assert run.stdout.strip() == "2"
        (job,) = probe.jobs()
        events, deadline = [], time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            events = [e for e in job.run() if e.kind == "cuda_oom"]
            time.sleep(0.05)
    finally:
        probe.stop()
    assert probe.probe is None
    (event,) = events
    assert event.attrs["api"] == "cuMemAlloc_v2" and event.attrs["requested_bytes"] == 2 * TIB
    assert event.attrs["error_name"] == "CUDA_ERROR_OUT_OF_MEMORY" and event.host == "node-7"


def test_nested_option_parses_and_bad_values_are_refused():
    assert EbpfProbeConfig.parse("/a/libcuda.so.1").report_nested is True
    assert EbpfProbeConfig.parse("/a/libcuda.so.1,nested=0") == EbpfProbeConfig(("/a/libcuda.so.1",),
                                                                                 report_nested=False)
    with pytest.raises(ProbeError, match="'nested=yes' is not nested=0 or nested=1"):
        EbpfProbeConfig.parse("nested=yes")


@requires_bpf
def test_the_agent_sends_the_driver_oom_nested_in_cudamalloc(fake_build: FakeBuild, app_runner: AppRunner,
                                                              tmp_path):
    """The H200 regression of issue 14: cudaMalloc's failure was sent, the cuMemAlloc_v2 failure inside it
    (depth 1, the root cause) was only counted. The agent sends both now."""
    # The program calls into libfakecuda.so itself; links named like the real libraries classify it for both.
    driver, runtime = tmp_path / "libcuda.so.1", tmp_path / "libcudart.so.13"
    driver.symlink_to(fake_build.lib)
    runtime.symlink_to(fake_build.lib)
    probe = load_probe(ProbeSpec.parse(f"ebpf:{driver},{runtime}"), "node-7")
    probe.start()
    try:
        proc = app_runner.start(f"cudaMalloc:{2 * TIB}")
        app_runner.finish(proc)
        (job,) = probe.jobs()
        events, deadline = [], time.monotonic() + 5
        while len(events) < 2 and time.monotonic() < deadline:
            events += [e for e in job.run() if e.kind == "cuda_oom" and e.pid == proc.pid]
            time.sleep(0.05)
    finally:
        probe.stop()
    assert [(e.attrs["api"], e.attrs["error_name"], e.labels["depth"]) for e in events] == [
        ("cuMemAlloc_v2", "CUDA_ERROR_OUT_OF_MEMORY", "1"), ("cudaMalloc", "cudaErrorMemoryAllocation", "0")]
