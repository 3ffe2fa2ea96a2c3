"""Builds the fake CUDA/NCCL library and its driver program, and runs the program under a probe."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TIB = 1 << 40


@dataclass(frozen=True)
class FakeBuild:
    """The compiled stand-in library, the program linked to it, and a copy named like the real driver."""

    lib: Path
    app: Path
    libcuda_copy: Path


@pytest.fixture(scope="session")
def fake_build(tmp_path_factory: pytest.TempPathFactory) -> FakeBuild:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed on this machine")
    out = tmp_path_factory.mktemp("fakecuda")
    lib, app, copy = out / "libfakecuda.so", out / "fakeapp", out / "libcuda.so.1"
    subprocess.run(["gcc", "-Wall", "-Werror", "-shared", "-fPIC", "-O2", "-o", str(lib),
                    str(HERE / "fakecuda.c")], check=True)
    subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-o", str(app), str(HERE / "fakeapp.c"), f"-L{out}",
                    "-lfakecuda", f"-Wl,-rpath,{out}"], check=True)
    shutil.copy(lib, copy)
    return FakeBuild(lib, app, copy)


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


@pytest.fixture(scope="session")
def app_runner(fake_build: FakeBuild) -> Iterator[AppRunner]:
    yield AppRunner(fake_build.app)
