"""The recorded two-rank NCCL hang (issue 7, CPU part): rank 1 skips one all-reduce, rank 0's watchdog times
out. Its logs go through the log probe CLI into events, and the events through the shipped rules."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.engine.backtest import backtest
from gpuslo.engine.rulebook import load_directory

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "nccl-hang"
EXAMPLE = ROOT / "examples" / "incidents" / "cpu-recorded-nccl-hang.jsonl"
PROBE_ARGS = ["probe", "logs", "--once", "--format", "jsonl", "--host", "gpu-a", "--job", "nccl-hang-cpu",
              "--label", "world_size=2", str(LOGS / "rank0.log"), str(LOGS / "rank1.log")]


def comparable(event: dict) -> dict:
    """An event without what depends on where the repository lies (the log path and the id made from it)."""
    return {**{k: v for k, v in event.items() if k != "id"},
            "labels": {k: v for k, v in event["labels"].items() if k != "log"}}


def test_the_log_probe_turns_the_two_rank_logs_into_the_recorded_events():
    result = CliRunner().invoke(main, PROBE_ARGS, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    got = [json.loads(line) for line in result.output.splitlines()]
    recorded = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    assert [comparable(e) for e in got] == [comparable(e) for e in recorded]
    (timeout,) = got  # the watchdog prints the timeout three times; rank 1 reports nothing
    assert (timeout["kind"], timeout["rank"], timeout["attrs"]["op"], timeout["attrs"]["seq"]) == \
        ("nccl_timeout", 0, "ALLREDUCE", 7)
    assert timeout["attrs"]["timeout_ms"] == 20000 and timeout["labels"]["world_size"] == "2"


def test_the_shipped_rules_name_the_op_seq_victim_and_the_rank_that_never_joined():
    books, problems = load_directory(ROOT / "rules")
    assert not problems
    (result,) = backtest(EXAMPLE, [books])
    fired = {v.rule: v for v in result.violations}
    assert set(fired) == {"nccl-watchdog-timeout"}  # one victim: collective-hang needs two
    violation = fired["nccl-watchdog-timeout"]
    assert violation.group == {"job": "nccl-hang-cpu"}
    assert "NCCL ALLREDUCE (seq 7) timed out after 20065 ms on gpu-a rank 0" in violation.summary
    assert "Timed out in ALLREDUCE seq 7: rank 0; never joined: rank 1 of world size 2 (the suspect)." \
        in violation.summary
