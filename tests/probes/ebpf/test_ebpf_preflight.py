"""preflight: the real checks pass on this machine; each missing part gets one clear message."""

from __future__ import annotations

import os

import pytest
from bpf_support import requires_bpf

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.ebpf.preflight import PreflightPaths, preflight


@requires_bpf
def test_everything_present_here():
    report = preflight()
    assert report.kernel_release == os.uname().release
    assert os.path.isdir(report.headers)
    assert os.path.exists(os.path.join(report.tracefs, "uprobe_events"))


@requires_bpf
@pytest.mark.parametrize(("paths", "expected"), [
    (PreflightPaths(modules_dir="/nonexistent/modules"),
     "missing: kernel headers at /nonexistent/modules/{release}/build (BTF present, but BCC compiles against "
     "headers; run scripts/setup-kernel-headers.sh as root after apt-get install linux-headers-cloud-amd64)"),
    (PreflightPaths(tracefs=("/nonexistent/tracing",)),
     "missing: tracefs with uprobe_events at /nonexistent/tracing (mount -t tracefs nodev /sys/kernel/tracing, "
     "or run scripts/setup-kernel-headers.sh)"),
    (PreflightPaths(bcc_module="bcc_not_installed_here"),
     "missing: the BCC Python module 'bcc_not_installed_here' (No module named 'bcc_not_installed_here'; "
     "install python3-bpfcc, then run scripts/setup-bcc-venv.sh so the venv sees it)"),
])
def test_one_missing_part_one_message(paths, expected):
    with pytest.raises(ProbeError) as caught:
        preflight(paths)
    assert str(caught.value) == "eBPF probe unavailable, " + expected.format(release=os.uname().release)


@requires_bpf
def test_several_missing_parts_in_one_message():
    with pytest.raises(ProbeError) as caught:
        preflight(PreflightPaths(modules_dir="/nonexistent", btf="/nonexistent/btf", tracefs=("/nonexistent",)))
    message = str(caught.value)
    assert message.count("eBPF probe unavailable") == 1
    assert "kernel headers at /nonexistent/" in message and "(BTF absent" in message
    assert "tracefs with uprobe_events at /nonexistent " in message


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_not_root_names_root_and_bpf_permission():
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody for real, then run the real checks
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                preflight()
                message = "no error"
            except ProbeError as exc:
                message = str(exc)
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    assert message.startswith("eBPF probe unavailable, missing: root (running as uid 65534; run the agent as "
                              "root); permission to use bpf() (EPERM; run as root or grant CAP_BPF, CAP_PERFMON "
                              "and CAP_SYS_ADMIN)")
