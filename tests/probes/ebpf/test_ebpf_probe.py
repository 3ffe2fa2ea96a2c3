"""The real probe, attached with BCC to the fake CUDA/NCCL library, watching the fake program's calls."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from bpf_support import requires_bpf
from ebpf_support import TIB, AppRunner, FakeBuild

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event, parse_event
from gpuslo.probes.ebpf import CudaProbe, LibrarySet, PreflightPaths, bpf_text
from gpuslo.probes.ebpf.functions import FUNCTION_IDS, FUNCTIONS
from gpuslo.probes.ebpf.gpu_resolve import GpuResolver


def _probe(build: FakeBuild, **kwargs) -> CudaProbe:
    lib = str(build.lib)
    libs = kwargs.pop("libraries", LibrarySet(cuda=lib, cudart=lib, nccl=lib))
    return CudaProbe(libs, "node-7", pids=(), gpu_resolver=GpuResolver(nvml=None), **kwargs)


@pytest.fixture(scope="module")
def probe(fake_build: FakeBuild) -> Iterator[CudaProbe]:
    probe = _probe(fake_build)
    probe.start()
    yield probe
    probe.close()


def run_watched(probe: CudaProbe, runner: AppRunner, *calls: str, env: dict[str, str] | None = None) -> int:
    proc = runner.start(*calls, env=env)
    probe.watch_pid(proc.pid)
    try:
        runner.finish(proc)
    finally:
        probe.unwatch_pid(proc.pid)
    return proc.pid


def collect(probe: CudaProbe, count: int, deadline_s: float = 5.0) -> list[Event]:
    """Poll until count events came (or the deadline), then once more to catch any extra."""
    events: list[Event] = []
    end = time.monotonic() + deadline_s
    while len(events) < count and time.monotonic() < end:
        events += probe.poll(0.2)
    return events + probe.poll(0.05)


def summary(event: Event) -> tuple:
    return (event.attrs["api"], event.kind, event.attrs["error_code"], event.attrs["error_name"],
            event.attrs.get("requested_bytes"), event.labels["depth"])


def test_bpf_text_is_complete_without_a_kernel():
    text = bpf_text()
    assert '#include "record.h"' not in text and "struct gs_record {" in text
    assert "BPF_RINGBUF_OUTPUT(events, GS_RINGBUF_PAGES);" in text
    assert text.count("int gs_enter_") == text.count("int gs_leave_") == len(FUNCTIONS)
    alloc = FUNCTION_IDS["cuMemAlloc_v2"]
    assert f"return gs_enter({alloc}, PT_REGS_PARM2(ctx), 1, 0);" in text
    nccl = FUNCTION_IDS["ncclCommGetAsyncError"]
    assert f"return gs_leave({nccl}, (s32)PT_REGS_RC(ctx), 0, 1);" in text


def test_build_reports_what_is_missing_before_touching_bcc(fake_build):
    probe = _probe(fake_build, preflight_paths=PreflightPaths(tracefs=("/nonexistent/tracing",)))
    with pytest.raises(ProbeError, match="tracefs with uprobe_events at /nonexistent/tracing"):
        probe.start()


@requires_bpf
def test_every_function_attaches_in_its_own_library(probe, fake_build):
    assert [(p.symbol, p.path, p.how) for p in probe.attached] == [
        (f.symbol, str(fake_build.lib), "own library") for f in FUNCTIONS]


@requires_bpf
def test_failed_cudamalloc_reports_inner_driver_call_and_outer_runtime_call(probe, app_runner):
    pid = run_watched(probe, app_runner, f"cudaMalloc:{2 * TIB}")
    inner, outer = collect(probe, 2)
    assert summary(inner) == ("cuMemAlloc_v2", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", 2 * TIB, "1")
    assert summary(outer) == ("cudaMalloc", "cuda_oom", 2, "cudaErrorMemoryAllocation", 2 * TIB, "0")
    for event in (inner, outer):
        assert (event.pid, event.host, event.source, event.gpu) == (pid, "node-7", "ebpf", None)
        assert event.labels["tid"] == str(pid) and event.labels["comm"] == "fakeapp"
        assert parse_event(event.to_dict()) == event  # valid per the Event contract
    assert outer.attrs["duration_us"] >= inner.attrs["duration_us"] > 0
    assert outer.time >= inner.time
    assert "requesting 2199023255552 bytes (2.0 TiB)" in outer.message


@requires_bpf
def test_report_nested_false_counts_a_nested_failure_instead_of_sending_it(fake_build, app_runner):
    probe = _probe(fake_build, report_nested=False)
    probe.start()
    try:
        run_watched(probe, app_runner, f"cudaMalloc:{2 * TIB}")
        (event,) = collect(probe, 1)
        assert summary(event) == ("cudaMalloc", "cuda_oom", 2, "cudaErrorMemoryAllocation", 2 * TIB, "0")
        assert probe.nested_failures == 1
    finally:
        probe.close()


@requires_bpf
def test_exact_events_and_success_counts_of_a_mixed_run(probe, app_runner):
    before = probe.success_counts()
    run_watched(probe, app_runner, "cuMemAlloc_v2:64", "cuMemAlloc_v2:0", f"cuMemAllocAsync:{TIB}",
                f"cuMemCreate:{3 * TIB}", f"cuMemAllocManaged:{TIB + 1}", "cudaMalloc:4096", "cuGraphLaunch:0",
                "cuGraphLaunch:1", "cudaGraphLaunch:0", "cudaStreamEndCapture:0", "ncclCommAbort:1",
                "ncclCommAbort:0", "ncclCommGetAsyncError:6", "ncclCommGetAsyncError:0")
    events = collect(probe, 13)
    assert [summary(e) if e.kind != "nccl_error" else (e.attrs["api"], e.attrs["error_code"], e.attrs["detail"])
            for e in events] == [
        ("cuMemAlloc_v2", "cuda_error", 1, "CUDA_ERROR_INVALID_VALUE", None, "0"),
        ("cuMemAlloc_v2", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", TIB, "1"),
        ("cuMemAllocAsync", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", TIB, "0"),
        ("cuMemAlloc_v2", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", 3 * TIB, "1"),
        ("cuMemCreate", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", 3 * TIB, "0"),
        ("cuMemAlloc_v2", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", TIB + 1, "1"),
        ("cuMemAllocManaged", "cuda_oom", 2, "CUDA_ERROR_OUT_OF_MEMORY", TIB + 1, "0"),
        ("cuGraphLaunch", "cuda_graph_error", 400, "CUDA_ERROR_INVALID_HANDLE", None, "0"),
        ("cuGraphLaunch", "cuda_graph_error", 400, "CUDA_ERROR_INVALID_HANDLE", None, "1"),
        ("cudaGraphLaunch", "cuda_graph_error", 400, "cudaErrorInvalidResourceHandle", None, "0"),
        ("cuStreamEndCapture", "cuda_graph_error", 901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", None, "1"),
        ("cudaStreamEndCapture", "cuda_graph_error", 901, "cudaErrorStreamCaptureInvalidated", None, "0"),
        ("ncclCommAbort", 0, "ncclCommAbort was called (it returned ncclSuccess)"),
        ("ncclCommAbort", 4, "ncclCommAbort was called (it returned ncclInvalidArgument)"),
        ("ncclCommGetAsyncError", 6, "ncclCommGetAsyncError reported an asynchronous communicator error"),
    ]
    assert events[-1].attrs["error_name"] == "ncclRemoteError"
    after = probe.success_counts()
    added = {name: after[name] - before[name] for name in after if after[name] != before[name]}
    assert added == {"cuMemAlloc_v2": 2, "cudaMalloc": 1, "cuGraphLaunch": 1, "ncclCommGetAsyncError": 1}
    assert probe.dropped() == 0


@requires_bpf
def test_async_error_is_read_through_the_out_pointer_at_return(probe, app_runner):
    pid = run_watched(probe, app_runner, "ncclCommGetAsyncError:5")
    records = probe.poll_records(1.0)
    assert [(r.pid, FUNCTIONS[r.func_id].symbol, r.ret, r.out_value, r.size) for r in records] == [
        (pid, "ncclCommGetAsyncError", 0, 5, 0)]


@requires_bpf
def test_unwatched_processes_are_ignored_and_the_gpu_comes_from_the_environment(probe, app_runner):
    before = probe.success_counts()
    other = app_runner.start(f"cudaMalloc:{TIB}", "cuMemAlloc_v2:64")
    # The watched program holds after its call, so its /proc/PID/environ is still there when we poll.
    watched = app_runner.start("cuGraphLaunch:0", "wait", env={"CUDA_VISIBLE_DEVICES": "3"})
    probe.watch_pid(watched.pid)
    try:
        assert watched.stdin is not None and watched.stdout is not None
        watched.stdin.write("go\n")
        watched.stdin.flush()
        assert watched.stdout.readline() == "cuGraphLaunch 400 -1\n"
        app_runner.finish(other)
        events = collect(probe, 1)
    finally:
        app_runner.finish(watched, stdin="done\n")
        probe.unwatch_pid(watched.pid)
    assert [(e.pid, e.attrs["api"], e.gpu) for e in events] == [(watched.pid, "cuGraphLaunch", 3)]
    assert probe.success_counts() == before


@requires_bpf
def test_fallback_attach_and_latency_mode_records_successes(fake_build, app_runner, caplog):
    probe = _probe(fake_build, libraries=LibrarySet(cuda=str(fake_build.lib)), send_success=True)
    with caplog.at_level(logging.INFO, logger="gpuslo.probes.ebpf.probe"):
        probe.start()
    try:
        hows = {p.symbol: p.how for p in probe.attached}
        assert hows["cuMemAlloc_v2"] == "own library"
        assert hows["cudaMalloc"] == hows["ncclCommAbort"] == "fallback: other library"
        assert f"cudaMalloc attached in {fake_build.lib} (fallback: other library)" in caplog.text
        pid = run_watched(probe, app_runner, "cudaMalloc:4096")
        records = probe.poll_records(1.0)
        assert [(r.pid, FUNCTIONS[r.func_id].symbol, r.ret, r.size, r.depth) for r in records] == [
            (pid, "cuMemAlloc_v2", 0, 4096, 1), (pid, "cudaMalloc", 0, 4096, 0)]
        assert probe.success_counts()["cudaMalloc"] == 1
    finally:
        probe.close()


@requires_bpf
def test_no_library_at_all_is_one_clear_error(fake_build):
    probe = _probe(fake_build, libraries=LibrarySet())
    try:
        with pytest.raises(ProbeError, match="no CUDA/NCCL function could be hooked; give the library paths"):
            probe.start()
    finally:
        probe.close()
