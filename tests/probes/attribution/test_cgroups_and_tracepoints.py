"""Finding the cgroup v2 mount, resolving a cgroup option, telling whether a tracepoint exists, and the
send-stall record as an interval: the parts of the cgroup and send-queue signals that need no BPF."""

from __future__ import annotations

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.attribution.bpf import build_text, has_tracepoint
from gpuslo.probes.attribution.cgroups import Cgroup, cgroup2_mount
from gpuslo.probes.attribution.collector import SEND_STALL, ZERO_WINDOW, Record, to_interval

HYBRID = ("cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
          "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")


def test_the_cgroup2_mount_is_found_in_hybrid_and_pure_v2_layouts_and_none_is_none(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(HYBRID)
    assert str(cgroup2_mount(str(mounts))) == "/sys/fs/cgroup/unified"
    mounts.write_text("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n")
    assert str(cgroup2_mount(str(mounts))) == "/sys/fs/cgroup"
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    assert cgroup2_mount(str(mounts)) is None
    assert cgroup2_mount(str(tmp_path / "absent")) is None


def test_a_relative_cgroup_resolves_under_the_mount_and_its_descendants_have_their_inode_ids(tmp_path):
    root = tmp_path / "cg"
    (root / "serving" / "worker").mkdir(parents=True)
    for d in (root / "serving", root / "serving" / "worker"):
        (d / "cgroup.controllers").write_text("")
    (root / "serving" / "cgroup.procs").write_text("12\n34\n")
    (root / "serving" / "worker" / "cgroup.procs").write_text("56\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {root} cgroup2 rw 0 0\n")
    cgroup = Cgroup.resolve("serving", str(mounts))
    assert cgroup.path == root / "serving"
    assert set(cgroup.ids().values()) == {root / "serving", root / "serving" / "worker"}
    assert all(cgid == path.stat().st_ino for cgid, path in cgroup.ids().items())
    assert cgroup.pids() == {12, 34, 56}


def test_a_relative_cgroup_without_a_cgroup2_mount_is_refused_precisely(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    with pytest.raises(ProbeError, match="no cgroup2 filesystem in"):
        Cgroup.resolve("serving", str(mounts))


def test_a_tracepoint_exists_where_its_format_file_is(tmp_path):
    (tmp_path / "events" / "sock" / "sock_send_length").mkdir(parents=True)
    (tmp_path / "events" / "sock" / "sock_send_length" / "format").write_text("name: sock_send_length\n")
    assert has_tracepoint("sock", "sock_send_length", (str(tmp_path / "none"), str(tmp_path)))
    assert not has_tracepoint("tcp", "tcp_probe", (str(tmp_path),))


def test_the_program_compiles_the_cgroup_and_send_stall_parts_only_when_asked():
    plain = build_text()
    assert "#define AT_CGROUPS 0" in plain and "#define AT_SEND_LENGTH 0" in plain
    both = build_text(port=8000, cgroups=True, send_length=True)
    assert "#define AT_CGROUPS 1" in both and "#define AT_SEND_LENGTH 1" in both and "#define AT_PORT 8000" in both


def test_a_send_stall_record_is_a_network_interval_naming_the_port():
    r = Record(start_ns=10, end_ns=5_000_010, arg=8000, pid=7, tid=8, kind=SEND_STALL)
    interval = to_interval(r)
    assert interval is not None and interval.kind == "send_stall" and interval.pid == 7
    assert interval.detail == "TCP send queue full on port 8000" and interval.duration_ms == 5.0
    assert to_interval(Record(kind=SEND_STALL, arg=0)).detail == "TCP send queue full"
    window = to_interval(Record(start_ns=0, end_ns=1_000_000, arg=8000, kind=ZERO_WINDOW))
    assert window is not None and window.kind == "zero_window" and window.detail.endswith("on port 8000")


def test_a_directory_that_is_not_cgroup_v2_is_refused(tmp_path):
    with pytest.raises(ProbeError, match="not a cgroup v2 directory"):
        Cgroup.resolve(str(tmp_path))
