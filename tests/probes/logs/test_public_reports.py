"""Real formats from public bug reports (see the fixture's header for each source), end to end through the CLI."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from gpuslo.cli.main import main

FIXTURE = Path(__file__).parent / "fixtures" / "public_reports.log"
GIB, MIB = 1 << 30, 1 << 20
FIRST_SOURCES = 7  # sources 1-7 give one event each; 8-11 are checked by the test after this one


def cli_events() -> list[dict]:
    result = CliRunner().invoke(main, ["probe", "logs", "--once", "--host", "h", str(FIXTURE)])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


def test_every_public_report_line_is_one_event_with_its_fields():
    events = cli_events()[:FIRST_SOURCES]
    got = [(e["kind"], e.get("gpu"), e.get("rank"), e["attrs"].get("requested_bytes"), e["attrs"].get("seq"),
            e["attrs"].get("op"), e["attrs"].get("timeout_ms")) for e in events]
    assert got == [
        ("cuda_oom", 0, None, int(1.5 * GIB), None, None, None),
        ("cuda_oom", 1, None, 24 * MIB, None, None, None),
        ("cuda_oom", 0, None, int(14.5 * MIB), None, None, None),
        ("nccl_timeout", None, 2, None, 1581, "ALLREDUCE", 600000),
        ("nccl_timeout", None, 5, None, 469511, "ALLREDUCE", 1800000),
        ("nccl_timeout", None, 0, None, 96121, "ALLREDUCE", 1800000),
        ("nccl_timeout", None, 7, None, 80079, "BROADCAST", 600000),
    ]
    assert events[0]["attrs"]["free_bytes"] == 0 and events[0]["attrs"]["total_bytes"] == 8 * GIB
    assert events[1]["attrs"]["reserved_unallocated_bytes"] == round(190.87 * MIB)
    assert events[5]["attrs"]["elapsed_ms"] == 25624890


def test_multi_line_fallen_off_the_bus_and_nccl_ooms_of_two_processes():
    before = datetime.now(UTC)
    events = cli_events()[FIRST_SOURCES:]
    got = [(e["kind"], e.get("gpu"), e.get("pid"), e["labels"]["family"], e["labels"].get("log_host"),
            e["attrs"].get("xid"), e["attrs"].get("pci_bus"), e["attrs"].get("requested_bytes")) for e in events]
    assert got == [
        ("gpu_xid", None, None, "nvrm_gpu_lost", None, 79, "0000:c5:00", None),  # dmesg, continuation indented
        ("gpu_xid", None, None, "nvrm_gpu_lost", "gpu-b12", 79, "0000:1c:00", None),  # journald, prefix per line
        ("gpu_xid", None, 3107, "nvrm_xid", "gpu-b12", 79, "0000:5d:00", None),
        ("cuda_oom", 0, 2741307, "nccl_cuda_failure", "ins-5ab2c", None, None, None),
        ("cuda_oom", 5, 4172039, "nccl_cuda_failure", "ng40217", None, None, 4194304),  # size from the calloc line
    ]
    assert all(e["host"] == "h" for e in events)  # the probe's host; the log's host is the label
    assert events[0]["attrs"]["detail"] == "GPU has fallen off the bus (no Xid number in the log)"
    assert events[0]["message"].splitlines() == [
        "[ 2407.115203] NVRM: The NVIDIA GPU 0000:c5:00.0",
        "               NVRM: (PCI ID: 10de:2335) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands."]
    assert len(events[1]["message"].splitlines()) == 3
    assert events[4]["message"].splitlines()[-1].endswith("NCCL WARN Failed to CUDA calloc 4194304 bytes")
    # "Mar 23 17:42:11" has no year: this year's, or last year's when this year's is ahead of the clock
    for event, second in ((events[1], 9), (events[2], 11)):
        stamp = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
        assert (stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second) == (3, 23, 17, 42, second)
        assert before - timedelta(days=366) < stamp <= datetime.now(UTC) + timedelta(days=1)
