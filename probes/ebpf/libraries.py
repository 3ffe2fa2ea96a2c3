"""Find the CUDA driver, runtime and NCCL libraries: by explicit path, in a process, or on the loader path."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.ebpf.functions import LIBCUDA, LIBCUDART, LIBNCCL

# libcuda.so.1, libcudart.so.12, libnccl.so.2.21.5; not libcudart_static.a, libnccl-net.so, libcuda_stub
_FAMILY_PATTERNS: Mapping[str, re.Pattern[str]] = {
    LIBCUDA: re.compile(r"^libcuda\.so(\.\d+)*$"),
    LIBCUDART: re.compile(r"^libcudart\.so(\.\d+)*$"),
    LIBNCCL: re.compile(r"^libnccl\.so(\.\d+)*$"),
}
_LDCONFIG_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$")


@dataclass(frozen=True)
class LibrarySet:
    """Paths of the libraries to hook; None where the family was not found."""

    cuda: str | None = None
    cudart: str | None = None
    nccl: str | None = None

    def path(self, family: str) -> str | None:
        """The path for a family name of functions.LIBRARIES."""
        return {LIBCUDA: self.cuda, LIBCUDART: self.cudart, LIBNCCL: self.nccl}[family]

    def merged(self, other: LibrarySet) -> LibrarySet:
        """This set with its gaps filled from other."""
        return replace(self, cuda=self.cuda or other.cuda, cudart=self.cudart or other.cudart,
                       nccl=self.nccl or other.nccl)

    def found(self) -> tuple[str, ...]:
        """The distinct paths present, in family order."""
        return tuple(dict.fromkeys(p for p in (self.cuda, self.cudart, self.nccl) if p))


def family_of(path: str) -> str | None:
    """The family (libcuda, libcudart, libnccl) a library file name belongs to, or None."""
    name = os.path.basename(path)
    return next((fam for fam, pat in _FAMILY_PATTERNS.items() if pat.match(name)), None)


def _from_paths(paths: Iterable[str]) -> LibrarySet:
    by_family: dict[str, str] = {}
    for path in paths:
        family = family_of(path)
        if family and family not in by_family:
            by_family[family] = path
    return LibrarySet(by_family.get(LIBCUDA), by_family.get(LIBCUDART), by_family.get(LIBNCCL))


def from_explicit(paths: Iterable[str]) -> LibrarySet:
    """Classify given paths by file name; a path that does not exist raises ProbeError."""
    paths = list(paths)
    for path in paths:
        if not os.path.isfile(path):
            raise ProbeError(f"eBPF probe: library {path} does not exist; check the configured library paths")
    return _from_paths(paths)


def from_process(pid: int, proc_root: str = "/proc") -> LibrarySet:
    """The libraries a running process has mapped (its /proc/PID/maps); empty when it cannot be read."""
    try:
        text = Path(proc_root, str(pid), "maps").read_text()
    except OSError:
        return LibrarySet()
    paths = (line.split(None, 5)[5].strip() for line in text.splitlines() if len(line.split(None, 5)) == 6)
    return _from_paths(p for p in paths if p.startswith("/"))


def parse_ldconfig(text: str, arch: str = "x86-64") -> dict[str, str]:
    """Soname → path from `ldconfig -p` output, keeping the first entry of the wanted architecture."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _LDCONFIG_LINE.match(line)
        if match and arch in match.group(2):
            found.setdefault(match.group(1), match.group(3))
    return found


def from_loader_cache(ldconfig: str = "ldconfig") -> LibrarySet:
    """The libraries the dynamic loader would pick (`ldconfig -p`); empty when ldconfig cannot run."""
    try:
        text = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return LibrarySet()
    return _from_paths(parse_ldconfig(text).values())


def resolve(explicit: Iterable[str] = (), pid: int | None = None, use_loader: bool = True) -> LibrarySet:
    """Explicit paths first, then what process pid maps, then the loader's search path."""
    found = from_explicit(explicit)
    if pid is not None:
        found = found.merged(from_process(pid))
    if use_loader:
        found = found.merged(from_loader_cache())
    return found
