"""The NCCL eBPF probe on one H200 (scripts/gpu-nccl-probe.sh, 2026-12-01 11:37 UTC; the two-GPU kind was not lent).

A real one-rank PyTorch NCCL job (torch 2.11, the wheel's own nvidia/nccl/lib/libnccl.so.2, found in the job's
/proc/PID/maps) ran 200 + 200 all-reduces with the probe attached from before its first collective, then 20,000
+ 200 with the probe attached again. The probe saw the communicator's init (rank 0 of 1) and counted every
call in BPF; examples/incidents/h200-nccl-progress.jsonl holds its nccl_progress events, the summary beside it
the hooked symbols and the overhead figures. Replaying it: the counts are exact, and no hang rule fires on a
single rank that simply went idle.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuslo.engine.events import parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "examples" / "incidents" / "h200-nccl-progress.jsonl"
SUMMARY = ROOT / "examples" / "incidents" / "h200-nccl-progress.summary.json"


def test_every_collective_of_the_real_job_was_counted_and_nothing_fires() -> None:
    events = [parse_event(json.loads(line)) for line in RECORDING.read_text().splitlines() if line.strip()]
    assert [(e.attrs["state"], e.attrs["seq"]) for e in events] == [
        ("progressing", 400), ("idle", 400), ("progressing", 20200), ("idle", 20200)]
    assert {(e.rank, e.job, e.attrs["op"], e.attrs["nranks"], e.attrs["lag"]) for e in events} == {
        (0, "h200-nccl-probe", "ALLREDUCE", 1, 0)}
    summary = json.loads(SUMMARY.read_text())
    (library,) = summary["libnccl"]
    assert library.endswith("site-packages/nvidia/nccl/lib/libnccl.so.2")
    assert {"ncclAllReduce", "ncclCommInitRank", "ncclCommAbort", "ncclGroupEnd"} <= set(summary["attached"])
    assert summary["A_probed_from_init_states"][0]["rank"] == 0 and summary["A_probed_from_init_states"][0][
        "nranks"] == 1
    rulebooks, problems = load_directory(ROOT / "rules")
    assert not problems, problems
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    assert [m.rule_id for m in evaluator.evaluate(events)] == []
