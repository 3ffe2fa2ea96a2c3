"""Finding the CUDA/NCCL libraries by path, in a running process, and on the loader's search path."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.ebpf import libraries
from gpuslo.probes.ebpf.libraries import LibrarySet

LDCONFIG_TEXT = """\
1234 libs found in cache `/etc/ld.so.cache'
\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12
\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so
"""


@pytest.mark.parametrize(("name", "family"), [
    ("/usr/lib/libcuda.so.1", "libcuda"), ("libcuda.so", "libcuda"), ("/x/libcudart.so.12.4.127", "libcudart"),
    ("libnccl.so.2", "libnccl"), ("libnccl-net.so", None), ("libcudart_static.a", None),
    ("libcuda_stub.so", None), ("libfakecuda.so", None),
])
def test_family_of(name, family):
    assert libraries.family_of(name) == family


def test_parse_ldconfig_keeps_the_first_x86_64_entry():
    found = libraries.parse_ldconfig(LDCONFIG_TEXT)
    assert found["libcuda.so.1"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
    assert found["libnccl.so.2"] == "/usr/lib/x86_64-linux-gnu/libnccl.so.2"


@pytest.mark.skipif(shutil.which("ldconfig") is None, reason="ldconfig is not installed on this machine")
def test_parse_real_ldconfig_output():
    text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    path = libraries.parse_ldconfig(text)["libc.so.6"]
    assert os.path.basename(path) == "libc.so.6" and os.path.exists(path)


def test_from_explicit_classifies_and_refuses_missing_paths(fake_build):
    found = libraries.from_explicit([str(fake_build.libcuda_copy), str(fake_build.lib)])
    assert found == LibrarySet(cuda=str(fake_build.libcuda_copy))
    with pytest.raises(ProbeError, match="library /nonexistent/libcuda.so.1 does not exist"):
        libraries.from_explicit(["/nonexistent/libcuda.so.1"])


def test_from_process_reads_the_maps_of_a_running_program(fake_build, app_runner):
    env = dict(os.environ, LD_PRELOAD=str(fake_build.libcuda_copy))
    proc = app_runner.start("cuMemAlloc_v2:64", env=env)
    try:
        found = libraries.from_process(proc.pid)
    finally:
        app_runner.finish(proc)
    assert found == LibrarySet(cuda=str(fake_build.libcuda_copy))
    assert libraries.from_process(proc.pid) == LibrarySet()  # gone: nothing, no error


def test_resolve_fills_gaps_in_order(fake_build):
    merged = LibrarySet(cuda="/a/libcuda.so.1").merged(LibrarySet(cuda="/b", nccl="/b/libnccl.so.2"))
    assert merged == LibrarySet(cuda="/a/libcuda.so.1", nccl="/b/libnccl.so.2")
    found = libraries.resolve([str(fake_build.libcuda_copy)], pid=os.getpid(), use_loader=False)
    assert found.cuda == str(fake_build.libcuda_copy)
