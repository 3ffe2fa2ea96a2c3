"""The two-rank NCCL hang recorded on two H200s (scripts/h200x2-nccl-hang.sh, 2026-11-29 13:33 UTC).

examples/incidents/h200x2-nccl-hang.jsonl is what `gpuslo serve` stored while a real two-rank job
(scripts/nccl_hang_job.py, NCCL backend, one H200 per rank) had rank 1 skip an all-reduce: rank 0's
ProcessGroupNCCL watchdog timed out after 20 s, which the log probe read from rank 0's output, and the agent's
eBPF and NVML probes reported up. Replaying it must name the collective, the sequence number, the rank that
timed out and the rank that never joined.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuslo.engine.events import parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "examples" / "incidents" / "h200x2-nccl-hang.jsonl"


def test_the_real_watchdog_timeout_names_the_rank_that_never_joined() -> None:
    events = sorted((parse_event(json.loads(line)) for line in RECORDING.read_text().splitlines() if line.strip()),
                    key=lambda e: (e.time, e.id))
    timeout = next(e for e in events if e.kind == "nccl_timeout")
    assert (timeout.attrs["op"], timeout.attrs["seq"], timeout.rank) == ("ALLREDUCE", 7, 0)
    assert timeout.attrs["timeout_ms"] == 20000 and timeout.attrs["elapsed_ms"] > 20000
    assert {e.attrs["probe"] for e in events if e.kind == "probe_status"} == {"ebpf", "nvml"}
    rulebooks, problems = load_directory(ROOT / "rules")
    assert not problems, problems
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    fired = [m for m in evaluator.evaluate(events) if m.rule_id == "nccl-watchdog-timeout"]
    assert len(fired) == 1
    summary = fired[0].summary
    for needle in ("ALLREDUCE (seq 7)", "rank 0", "never joined: rank 1 of world size 2"):
        assert needle in summary, summary
    assert fired[0].group_key == "job=nccl-hang-h200x2"
