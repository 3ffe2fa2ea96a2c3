"""Serving processes selected by cgroup (v2): a directory's id is its inode number, which is what the kernel's
`bpf_get_current_cgroup_id()` returns for a task in it (cgroup v2 only; in a hybrid mount, the `unified` tree)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuslo.engine.errors import ProbeError


def cgroup2_mount(mounts: str = "/proc/self/mounts") -> Path | None:
    """Where the cgroup v2 filesystem is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified in hybrid mode)."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


@dataclass(frozen=True)
class Cgroup:
    """A cgroup v2 directory whose processes (those of its descendants too) are serving processes."""

    path: Path

    @classmethod
    def resolve(cls, spec: str, mounts: str = "/proc/self/mounts") -> Cgroup:
        """An absolute directory, or one relative to the cgroup v2 mount (`system.slice/vllm.service`)."""
        path = Path(spec)
        if not path.is_absolute():
            root = cgroup2_mount(mounts)
            if root is None:
                raise ProbeError(f"attribution probe: cgroup {spec!r}: no cgroup2 filesystem in {mounts}")
            path = root / spec
        if not (path / "cgroup.controllers").is_file():
            raise ProbeError(f"attribution probe: cgroup {spec!r}: {path} is not a cgroup v2 directory "
                             "(no cgroup.controllers)")
        return cls(path)

    def ids(self) -> dict[int, Path]:
        """The cgroup ids of the directory and of every directory below it now (a task's id is its own
        cgroup's, not its ancestors')."""
        found: dict[int, Path] = {}
        for top, _dirs, _files in os.walk(self.path):
            try:
                found[os.stat(top).st_ino] = Path(top)
            except OSError:  # removed while walking
                continue
        return found

    def pids(self) -> set[int]:
        """The processes in the directory and below it now."""
        found: set[int] = set()
        for top in self.ids().values():
            try:
                found |= {int(p) for p in (top / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                continue
        return found
