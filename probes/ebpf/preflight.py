"""Checks that the eBPF probe can run here; one ProbeError names everything missing and how to fix it."""

from __future__ import annotations

import ctypes
import errno
import importlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuslo.engine.errors import ProbeError

_SYS_BPF = 321  # x86-64
_BPF_MAP_CREATE = 0
_BPF_MAP_TYPE_ARRAY = 2


@dataclass(frozen=True)
class PreflightPaths:
    """Where the checks look; tests point a field at a path that does not exist to see its message."""

    modules_dir: str = "/lib/modules"
    kernel_release: str = ""  # empty: the running kernel's
    btf: str = "/sys/kernel/btf/vmlinux"
    tracefs: tuple[str, ...] = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
    bcc_module: str = "bcc"


@dataclass(frozen=True)
class PreflightReport:
    """What preflight found when everything needed is present."""

    kernel_release: str
    headers: str
    tracefs: str
    btf: bool


def _bpf_syscall_problem() -> str | None:
    """Create and close a one-slot BPF array map: the cheapest proof that bpf(2) works for us."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 5)(_BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0)
    fd = libc.syscall(_SYS_BPF, _BPF_MAP_CREATE, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd >= 0:
        os.close(fd)
        return None
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        return "the bpf() system call (kernel built without CONFIG_BPF_SYSCALL; use a kernel with BPF)"
    return (f"permission to use bpf() ({errno.errorcode.get(err, err)}; run as root or grant "
            "CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN)")


def _present(path: Path, want_dir: bool = False) -> bool:
    """Whether path exists; one we may not look at counts as present (the root check reports that)."""
    try:
        mode = path.stat().st_mode
    except PermissionError:
        return True
    except OSError:
        return False
    return stat.S_ISDIR(mode) or not want_dir


def _bcc_problem(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except (ImportError, OSError) as exc:
        return (f"the BCC Python module '{module}' ({exc}; install python3-bpfcc, then run "
                "scripts/setup-bcc-venv.sh so the venv sees it)")
    return None


def preflight(paths: PreflightPaths = PreflightPaths()) -> PreflightReport:
    """Check root, bpf(), kernel headers, tracefs with uprobe_events, and BCC; raise one ProbeError if any lack."""
    missing: list[str] = []
    if os.geteuid() != 0:
        missing.append(f"root (running as uid {os.geteuid()}; run the agent as root)")
    bpf_problem = _bpf_syscall_problem()
    if bpf_problem:
        missing.append(bpf_problem)
    release = paths.kernel_release or os.uname().release
    headers = Path(paths.modules_dir, release, "build")
    btf = _present(Path(paths.btf))
    if not _present(headers, want_dir=True):
        missing.append(f"kernel headers at {headers} (BTF {'present' if btf else 'absent'}, but BCC compiles "
                       "against headers; run scripts/setup-kernel-headers.sh as root after "
                       "apt-get install linux-headers-cloud-amd64)")
    tracefs = next((t for t in paths.tracefs if _present(Path(t, "uprobe_events"))), None)
    if tracefs is None:
        missing.append(f"tracefs with uprobe_events at {' or '.join(paths.tracefs)} "
                       "(mount -t tracefs nodev /sys/kernel/tracing, or run scripts/setup-kernel-headers.sh)")
    bcc_problem = _bcc_problem(paths.bcc_module)
    if bcc_problem:
        missing.append(bcc_problem)
    if missing:
        raise ProbeError("eBPF probe unavailable, missing: " + "; ".join(missing))
    return PreflightReport(kernel_release=release, headers=str(headers.resolve()), tracefs=str(tracefs), btf=btf)
