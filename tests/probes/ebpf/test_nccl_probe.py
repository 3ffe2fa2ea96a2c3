"""The NCCL collective probe on real BPF: uprobes on a libnccl look-alike with NCCL's signatures, driven by
two "rank" processes, one of which stops a collective short — the rank that never entered is named."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bpf_support import requires_bpf
from ebpf_support import HERE

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.agent import ProbeSpec, load_probe
from gpuslo.probes.ebpf.nccl_probe import NcclProbe, bpf_text, libnccl_in_use, process_identity

IDLE_LATER = 11 * 10**9  # a poll "11 s later": past the default idle_after_s of 10 s


@pytest.fixture(scope="module")
def nccl_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("gcc") is None:
        pytest.skip(reason="gcc is not installed on this machine: it builds the libnccl look-alike")
    out = tmp_path_factory.mktemp("fakenccl") / "nvidia" / "nccl" / "lib"  # where PyTorch's wheels put it
    out.mkdir(parents=True)
    lib, rank = out / "libnccl.so.2", out / "rank"
    subprocess.run(["gcc", "-Wall", "-Werror", "-shared", "-fPIC", "-O2", "-Wl,-soname,libnccl.so.2", "-o",
                    str(lib), str(HERE / "fakenccl.c")], check=True)
    subprocess.run(["gcc", "-Wall", "-Werror", "-O2", "-o", str(rank), str(HERE / "fakencclrank.c"), str(lib),
                    f"-Wl,-rpath,{out}"], check=True)
    return lib, rank


class Ranks:
    """Rank processes started paused ("ready"), released together, then held after "done"."""

    def __init__(self, binary: Path, job: str = "job-7"):
        self.binary, self.job, self.procs = binary, job, []

    def start(self, rank: int, world: int, *calls: str) -> subprocess.Popen[str]:
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "TORCHELASTIC_RUN_ID": self.job}
        proc = subprocess.Popen([str(self.binary), *calls], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=env)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        self.procs.append(proc)
        return proc

    def run(self) -> None:
        for proc in self.procs:
            proc.stdin.write("go\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        for proc in self.procs:
            assert proc.stdout.readline() == "done\n"  # type: ignore[union-attr]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.communicate("end\n", timeout=10)


@pytest.fixture
def ranks(nccl_build: tuple[Path, Path]) -> Iterator[Ranks]:
    started = Ranks(nccl_build[1])
    try:
        yield started
    finally:
        started.close()


def test_the_program_has_one_stub_per_hook_and_counts_in_maps_only() -> None:
    text = bpf_text()
    assert text.count("gs_collective_enter(ctx,") == 8 and "ringbuf" not in text.lower()


def test_libnccl_in_use_is_found_in_proc_maps_under_a_wheel_path(nccl_build, ranks: Ranks) -> None:
    lib, _ = nccl_build
    proc = ranks.start(0, 1, "allreduce:1")
    found = libnccl_in_use(pids=[proc.pid, os.getpid()])
    assert found == {str(lib): (proc.pid,)} and "/nvidia/nccl/lib/" in str(lib)
    assert process_identity(proc.pid) == {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "job": "job-7"}


@requires_bpf
def test_the_rank_that_never_entered_the_collective_is_behind_when_both_go_idle(nccl_build, ranks: Ranks) -> None:
    lib, _ = nccl_build
    probe = NcclProbe([str(lib)], "node-1")
    probe.start()
    try:
        assert {symbol for symbol, _ in probe.attached} >= {"ncclAllReduce", "ncclCommInitRank", "ncclReduce"}
        first = ranks.start(0, 2, "allreduce:7")
        second = ranks.start(1, 2, "allreduce:6")
        ranks.run()
        progressing = probe.poll()
        idle = probe.poll(time.monotonic_ns() + IDLE_LATER)
        again = probe.poll(time.monotonic_ns() + IDLE_LATER)
    finally:
        probe.close()
    assert sorted((e.rank, e.attrs["state"], e.attrs["seq"]) for e in progressing) == [
        (0, "progressing", 7), (1, "progressing", 6)]
    by_rank = {e.rank: e for e in idle}
    assert set(by_rank) == {0, 1} and again == []  # idle is said once
    zero, one = by_rank[0], by_rank[1]
    assert (zero.pid, one.pid) == (first.pid, second.pid) and zero.job == one.job == "job-7"
    assert zero.attrs["op"] == one.attrs["op"] == "ALLREDUCE" and zero.attrs["nranks"] == 2
    assert (zero.attrs["seq"], zero.attrs["lag"]) == (7, 0) and (one.attrs["seq"], one.attrs["lag"]) == (6, 1)
    assert zero.attrs["count"] == 1024 + 6 and zero.gpu == 0
    assert zero.labels["world_size"] == "2" and zero.attrs["idle_ms"] >= 10_000


@requires_bpf
def test_stack_arguments_groups_aborts_and_async_errors(nccl_build, ranks: Ranks) -> None:
    lib, _ = nccl_build
    probe = NcclProbe([str(lib)], "node-1", idle_after_s=3600)
    probe.start()
    try:
        ranks.start(0, 2, "reduce:2", "group", "allgather:1")
        ranks.start(1, 2, "broadcast:3", "asyncerror", "abort")
        ranks.run()
        events = {e.rank: e for e in probe.poll()}
    finally:
        probe.close()
    zero, one = events[0], events[1]
    assert zero.attrs["seq"] == 4 and zero.attrs["op"] == "ALLGATHER" and zero.attrs["count"] == 4096
    assert zero.attrs["state"] == "progressing"
    assert one.attrs["state"] == "aborted" and one.attrs["aborts"] == 1 and one.attrs["async_error"] == 6
    assert one.attrs["seq"] == 3 and one.attrs["op"] == "BROADCAST"


@requires_bpf
def test_the_agent_face_finds_the_library_a_running_job_maps(nccl_build, ranks: Ranks) -> None:
    ranks.start(0, 1, "allreduce:3")
    probe = load_probe(ProbeSpec.parse("nccl"), "node-1")
    probe.start()
    try:
        ranks.run()
        (job,) = probe.jobs()
        events = job.run()
    finally:
        probe.stop()
    assert [(e.attrs["seq"], e.attrs["state"]) for e in events] == [(3, "progressing")]


def test_no_library_is_a_probe_error_naming_what_to_do() -> None:
    with pytest.raises(ProbeError, match="libnccl"):
        load_probe(ProbeSpec.parse("nccl:/nonexistent/libnccl.so.2"), "node-1").start()
