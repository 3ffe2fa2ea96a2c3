"""GPU of a process: NVML's process list first, then CUDA_VISIBLE_DEVICES from /proc/PID/environ."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuslo.probes.ebpf.gpu_resolve import GpuResolver, visible_device


def _sleeper(visible: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    # The child says when it runs: right after exec its /proc/PID/environ can still read empty.
    proc = subprocess.Popen([sys.executable, "-c", "print('up', flush=True); import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


@pytest.mark.parametrize(("visible", "gpu"), [("3", 3), (" 1 ", 1), ("0,1", None),
                                              ("GPU-8f5c1e6a-0000-0000-0000-000000000000", None), (None, None)])
def test_visible_device_from_a_real_process_environment(visible, gpu):
    proc = _sleeper(visible)
    try:
        assert visible_device(proc.pid) == gpu
    finally:
        proc.communicate(b"")


def test_nvml_answer_wins_and_its_failure_falls_back_once():
    proc = _sleeper("2")
    calls = []

    def broken() -> dict[int, int]:
        calls.append(1)
        raise RuntimeError("NVML Shared Library Not Found")

    try:
        assert GpuResolver(nvml=lambda: {proc.pid: 5}).gpu_of(proc.pid) == 5
        assert GpuResolver(nvml=lambda: {}).gpu_of(proc.pid) == 2
        resolver = GpuResolver(nvml=broken)
        assert [resolver.gpu_of(proc.pid), resolver.gpu_of(proc.pid)] == [2, 2]
        assert len(calls) == 1
    finally:
        proc.communicate(b"")


def test_unknown_pid_is_none():
    assert GpuResolver(nvml=None, proc_root="/nonexistent").gpu_of(1) is None
