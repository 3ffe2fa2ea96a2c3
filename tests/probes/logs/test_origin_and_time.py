"""Who printed a line (NCCL thread, log host) and when (syslog stamps without a year), as the parser uses them."""

from __future__ import annotations

from datetime import UTC, datetime

from logprobe_helpers import READ_TIME, parse_all

from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import kmsg_line

OOM = b"include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
CALLOC = b"include/alloc.h:185 NCCL WARN Failed to CUDA calloc 2097152 bytes\n"


def test_syslog_stamps_without_a_year_take_the_latest_year_not_in_the_future():
    # READ_TIME is 2025-03-01 00:00 UTC; each line names another GPU so none is an echo of another
    lines = (b"Feb 14 05:03:44 n1 kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1, Graphics Exception\n"
             b"Dec 31 23:59:58 n1 kernel: NVRM: Xid (PCI:0000:02:00): 13, pid=1, Graphics Exception\n"
             b"Mar  1 12:00:00 n1 kernel: NVRM: Xid (PCI:0000:03:00): 13, pid=1, Graphics Exception\n"
             b"Mar  3 08:00:00 n1 kernel: NVRM: Xid (PCI:0000:04:00): 13, pid=1, Graphics Exception\n"
             b"Feb 29 10:00:00 NVRM: Xid (PCI:0000:05:00): 13, pid=1, Graphics Exception\n")
    assert [e.time for e in parse_all(lines)] == [
        datetime(2025, 2, 14, 5, 3, 44, tzinfo=UTC),
        datetime(2024, 12, 31, 23, 59, 58, tzinfo=UTC),
        datetime(2025, 3, 1, 12, tzinfo=UTC),  # hours ahead: a zone east of UTC or a lagging clock, not last year
        datetime(2024, 3, 3, 8, tzinfo=UTC),
        datetime(2024, 2, 29, 10, tzinfo=UTC),  # 2025 has no Feb 29
    ]


def test_nccl_lines_of_other_processes_or_gpus_are_not_echoes_but_a_repeat_is():
    lines = (b"h1:100:101 [0] " + OOM + b"h1:100:101 [0] " + OOM  # the same thread twice: one incident
             + b"h1:200:201 [0] " + OOM + b"h1:100:102 [1] " + OOM + b"h2:100:101 [0] " + OOM)
    events = parse_all(lines)
    assert [(e.pid, e.gpu, e.labels["log_host"]) for e in events] == [
        (100, 0, "h1"), (200, 0, "h1"), (100, 1, "h1"), (100, 0, "h2")]
    assert all(e.host == "node1" for e in events)


def test_the_calloc_size_comes_only_from_the_same_thread():
    other_first = b"h1:100:101 [0] " + OOM + b"h1:100:999 [0] " + CALLOC + b"h1:100:101 [0] " + CALLOC
    (event,) = parse_all(other_first)
    assert "requested_bytes" not in event.attrs and event.message.count("\n") == 0
    same = b"h1:100:101 [0] " + OOM + b"\n\n" + b"h1:100:101 [0] " + CALLOC
    (event,) = parse_all(same)
    assert event.attrs["requested_bytes"] == 2097152 and event.message.count("\n") == 1


def test_a_cuda_failure_other_than_oom_keeps_its_kind_and_takes_no_size():
    lines = b"h1:100:101 [0] include/alloc.h:178 NCCL WARN Cuda failure 'invalid argument'\nh1:100:101 [0] " + CALLOC
    (event,) = parse_all(lines)
    assert (event.kind, dict(event.attrs)) == ("cuda_error", {
        "error_name": "cudaErrorInvalidValue", "error_code": 1, "api": "nccl"})


def test_the_unsupported_gpu_notice_is_not_an_incident_and_does_not_hide_the_next():
    lines = (b"[   12.000001] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1c82)\n"
             b"               NVRM: installed in this system is not supported by the\n"
             b"               NVRM: NVIDIA 535.54.03 driver release.\n"
             b"               NVRM: Please see 'Appendix A - Supported NVIDIA GPU Products'\n"
             b"               NVRM: in this release's README, available on the operating system\n"
             b"[   13.000001] NVRM: Xid (PCI:0000:3b:00): 48, pid=7, DBE (double bit error) ECC error\n")
    assert [(e.kind, e.attrs["xid"], e.attrs["pci_bus"]) for e in parse_all(lines)] == [("gpu_xid", 48, "0000:3b:00")]


def test_kmsg_record_with_escaped_newlines_is_one_incident():
    # /dev/kmsg keeps a multi-line printk in one record and escapes its newlines as \x0a
    record = (b"3,812,1843308146,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in "
              b"this system has\\x0aNVRM: fallen off the bus and is not responding to commands.\n")
    parsed = kmsg_line(record, boot_time=0.0)
    assert parsed is not None
    parser = LogParser(ParserSettings(host="n", source="kmsg"), clock=lambda: READ_TIME)
    events = parser.feed(parsed[1], 0) + parser.flush()
    assert [(e.kind, e.attrs["xid"], e.attrs["pci_bus"]) for e in events] == [("gpu_xid", 79, "0000:b3:00")]


def test_an_nccl_oom_keeps_its_size_when_another_thread_prints_between_its_two_lines():
    lines = (b"node7:2201:2290 [5] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
             b"node7:2201:2277 [5] NCCL INFO Channel 03/32 :    0   1   2   3\n"
             b"node7:2201:2290 [5] NCCL INFO include/alloc.h:48 -> 1\n"
             b"node7:2201:2290 [5] include/alloc.h:49 NCCL WARN Failed to CUDA calloc 6291456 bytes\n"
             b"node7:2201:2290 [5] NCCL INFO transport/p2p.cc:300 -> 1\n")
    (event,) = parse_all(lines)
    assert (event.kind, event.gpu, event.pid, event.attrs["requested_bytes"]) == ("cuda_oom", 5, 2201, 6291456)
    assert event.message.count("\n") == 1  # the block keeps its own two lines, not the interleaved ones


def test_an_interleaved_line_with_an_incident_of_its_own_is_not_lost():
    lines = (b"node7:2201:2290 [5] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'\n"
             b"node7:2202:2291 [6] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer n2<1>\n"
             b"node7:2201:2290 [5] include/alloc.h:49 NCCL WARN Failed to CUDA calloc 4194304 bytes\n")
    events = parse_all(lines)
    assert sorted((e.kind, e.gpu, e.attrs.get("requested_bytes")) for e in events) == [
        ("cuda_oom", 5, 4194304), ("nccl_error", 6, None)]
