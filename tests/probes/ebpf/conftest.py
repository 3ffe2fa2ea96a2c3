"""Builds the fake CUDA/NCCL library and its driver program, and runs the program under a probe."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from ebpf_support import HERE, AppRunner, FakeBuild


@pytest.fixture(scope="session")
def fake_build(tmp_path_factory: pytest.TempPathFactory) -> FakeBuild:
    if shutil.which("gcc") is None:
        pytest.skip(reason="gcc is not installed on this machine: it builds the libcuda look-alike the BPF "
                           "tests attach to")
    out = tmp_path_factory.mktemp("fakecuda")
    lib, app, copy = out / "libfakecuda.so", out / "fakeapp", out / "libcuda.so.1"
    subprocess.run(["gcc", "-Wall", "-Werror", "-shared", "-fPIC", "-O2", "-o", str(lib),
                    str(HERE / "fakecuda.c")], check=True)
    subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-o", str(app), str(HERE / "fakeapp.c"), f"-L{out}",
                    "-lfakecuda", f"-Wl,-rpath,{out}"], check=True)
    shutil.copy(lib, copy)
    return FakeBuild(lib, app, copy)


@pytest.fixture(scope="session")
def app_runner(fake_build: FakeBuild) -> Iterator[AppRunner]:
    yield AppRunner(fake_build.app)
