"""Real formats from public bug reports (see the fixture's header for each source), end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpuslo.cli.main import main

FIXTURE = Path(__file__).parent / "fixtures" / "public_reports.log"
GIB, MIB = 1 << 30, 1 << 20


def test_every_public_report_line_is_one_event_with_its_fields():
    result = CliRunner().invoke(main, ["probe", "logs", "--once", "--host", "h", str(FIXTURE)])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
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
