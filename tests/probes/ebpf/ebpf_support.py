"""The eBPF tests' stand-in CUDA library and its runs; the skip marker for root and working BPF (bpf_support)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
TIB = 1 << 40


@dataclass(frozen=True)
class FakeBuild:
    """The compiled stand-in library, the program linked to it, and a copy named like the real driver."""

    lib: Path
    app: Path
    libcuda_copy: Path


@dataclass(frozen=True)
class AppRun:
    """One finished run of the fake program: its pid and the result lines it printed."""

    pid: int
    lines: tuple[str, ...]


class AppRunner:
    """Starts the program paused on stdin, lets the test hook its pid, then releases it."""

    def __init__(self, app: Path):
        self.app = app

    def start(self, *calls: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen([str(self.app), *calls], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc

    @staticmethod
    def finish(proc: subprocess.Popen[str], stdin: str = "go\n") -> AppRun:
        out, _ = proc.communicate(stdin, timeout=30)
        assert proc.returncode == 0, out
        return AppRun(proc.pid, tuple(out.splitlines()))
