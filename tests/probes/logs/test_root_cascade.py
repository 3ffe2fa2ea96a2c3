"""Root or cascade: the registry's label on every log event, and the job-level correlation (rules/rootcause.yaml)
on recorded multi-rank incidents: the real two-H200 NCCL hang (no root: a rank that never joined) and the
NCCL fixtures of public reports put together as the ranks of one job (an OOM, or a NaN gradient, at the root)."""

from __future__ import annotations

import json
from pathlib import Path

from logprobe_helpers import FIXTURES, READ_TIME, fixture_bytes, load

from gpuslo.engine.cascades import analyze_cascade, role_of
from gpuslo.engine.events import parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.signatures import SIGNATURES

ROOT = Path(__file__).resolve().parents[3]
RECORDING = ROOT / "examples" / "incidents" / "h200x2-nccl-hang.jsonl"
CASCADE_RULES = {"root-cuda-error-then-nccl-timeout", "root-cuda-error-then-nccl-error",
                 "root-cuda-error-then-previous-error", "root-oom-then-nccl-timeout", "root-oom-then-nccl-error",
                 "root-driver-fault-then-nccl-timeout", "root-nonfinite-loss-then-nccl-timeout",
                 "root-nonfinite-loss-then-nccl-error"}


def evaluator() -> RuleEvaluator:
    rulebooks, problems = load_directory(ROOT / "rules")
    assert not problems, problems
    engine = RuleEvaluator()
    engine.load(rulebooks)
    return engine


def job_events(name: str, job: str, host: str) -> list:
    parser = LogParser(ParserSettings(host=host, source=name, job=job), clock=lambda: READ_TIME)
    return parser.scan(fixture_bytes(name), 0) + parser.flush()


def test_every_log_event_carries_its_role_and_signature():
    for name in sorted(path.name for path in FIXTURES.glob("*.log")):
        for event in load(name):
            assert event.labels["role"] in ("root", "cascade"), (name, event.kind)
            assert event.labels["signature"] in {s.id for s in SIGNATURES}, (name, event.labels["signature"])


def test_the_h200_hang_has_no_root_and_pages_only_the_hang_rule():
    events = load("h200x2_nccl_rank0.log")
    assert [(e.kind, e.labels["role"], e.labels["signature"]) for e in events] == [
        ("nccl_timeout", "cascade", "nccl-timeout"), ("nccl_error", "cascade", "nccl-peer-gone")]
    cascade = analyze_cascade(events)
    assert cascade is not None and cascade.root is None and len(cascade.cascades) == 2
    recorded = [parse_event(json.loads(line)) for line in RECORDING.read_text().splitlines() if line.strip()]
    assert [role_of(e) for e in recorded if e.kind == "nccl_timeout"] == ["cascade"]  # recorded before the label
    fired = {m.rule_id for m in evaluator().evaluate(sorted(recorded, key=lambda e: (e.time, e.id)))}
    assert "nccl-watchdog-timeout" in fired and not fired & CASCADE_RULES


def test_an_oom_on_one_rank_is_the_root_of_the_other_ranks_timeouts_and_aborts():
    # rank 5's NCCL OOM and network errors (nccl_oom_and_errors.log) and the other ranks' watchdog timeouts and
    # abort (nccl_timeouts.log), read as two hosts' logs of one job
    root_side = job_events("nccl_oom_and_errors.log", "train-9", "node-a")
    victims = job_events("nccl_timeouts.log", "train-9", "node-b")
    assert [(e.kind, e.labels["role"]) for e in root_side] == [
        ("cuda_oom", "root"), ("nccl_error", "root"), ("nccl_error", "cascade")]
    assert {e.labels["role"] for e in victims} == {"cascade"}
    cascade = analyze_cascade(root_side + victims)
    assert cascade is not None and cascade.root is root_side[0]
    assert len(cascade.cascades) == len(victims) + 1
    matches = [m for m in evaluator().evaluate(sorted(root_side + victims, key=lambda e: (e.time, e.id)))
               if m.rule_id in CASCADE_RULES]
    assert {m.rule_id for m in matches} == {"root-oom-then-nccl-timeout", "root-oom-then-nccl-error"}
    assert {m.group_key for m in matches} == {"job=train-9"}  # one violation per rule and job: folded repeats
    summary = next(m for m in matches if m.rule_id == "root-oom-then-nccl-timeout").summary
    assert "Root cause: cuda_oom on node-a GPU 5 (error_name cudaErrorMemoryAllocation)" in summary, summary
    assert "Page for the out-of-memory on node-a" in summary


def test_the_documented_inhibition_pages_once_for_the_root():
    """docs/alerts.md's "Root cause pages once" block, loaded as it is written: the root-cause violation of a job
    mutes the per-kind NCCL violations of that job and no other."""
    from gpuslo.engine.alerts import load_alerts_text
    from gpuslo.engine.alerts.routing import inhibited_by

    doc = (ROOT / "docs" / "alerts.md").read_text(encoding="utf-8").split("## Root cause pages once", 1)[1]
    block = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = load_alerts_text("receivers:\n  - {name: log, type: webhook, allow_private_network: true, "
                              "allow_http: true, url: \"http://127.0.0.1:9/hook\"}\n" + block, "alerts.yaml", {})
    root = {"violation_id": 1, "rule": "root-oom-then-nccl-timeout", "severity": "critical", "host": "node-a",
            "group": {"job": "train-9"}, "labels": {}}
    timeout = {"violation_id": 2, "rule": "nccl-watchdog-timeout", "severity": "critical", "host": "node-b",
               "group": {"job": "train-9"}, "labels": {}}
    assert "violation 1" in (inhibited_by(config.inhibit, timeout, [root]) or "")
    other_job = {**timeout, "group": {"job": "train-10"}}
    assert inhibited_by(config.inhibit, other_job, [root]) is None


def test_a_nan_gradient_on_one_rank_is_the_root_of_the_other_ranks_timeouts():
    """nan_loss.log (rank 13 stops on a NaN grad norm) and nccl_timeouts.log (the other ranks' watchdog timeouts
    and abort), read as two hosts' logs of one job: the NaN is named as the root, once per job."""
    root_side = job_events("nan_loss.log", "train-11", "node-a")
    victims = job_events("nccl_timeouts.log", "train-11", "node-b")
    assert [(e.kind, e.rank, e.gpu, e.attrs.get("metric"), e.labels["role"]) for e in root_side] == [
        ("loss_nonfinite", None, None, "lm loss", "root"), ("loss_nonfinite", 13, 5, "grad_norm", "root")]
    assert root_side[0].attrs == {"value": "nan", "step": 731, "metric": "lm loss"}
    cascade = analyze_cascade(root_side + victims)  # the root that names its rank and GPU
    assert cascade is not None and cascade.root is root_side[1] and len(cascade.cascades) == len(victims)
    fired = [m for m in evaluator().evaluate(sorted(root_side + victims, key=lambda e: (e.time, e.id)))]
    assert {m.rule_id for m in fired if m.rule_id in CASCADE_RULES} == {
        "root-nonfinite-loss-then-nccl-timeout", "root-nonfinite-loss-then-nccl-error"}
    assert {m.group_key for m in fired if m.rule_id in CASCADE_RULES} == {"job=train-11"}
    assert "training-loss-nonfinite" in {m.rule_id for m in fired}
    summaries = {m.summary for m in fired if m.rule_id == "root-nonfinite-loss-then-nccl-timeout"}
    assert any("Root cause: loss_nonfinite on node-a rank 13 GPU 5 (error_name AssertionError, metric grad_norm)"
               in s and "Page for the non-finite grad_norm on node-a rank 13, not for the timeouts." in s
               for s in summaries), summaries


def _parsed(text: str, job: str, host: str) -> list:
    parser = LogParser(ParserSettings(host=host, source=f"{host}.log", job=job), clock=lambda: READ_TIME)
    return parser.scan(text.encode() + b"\n", 0) + parser.flush()


def test_a_cuda_check_failure_on_one_rank_is_the_root_of_the_other_ranks_timeouts():
    """The session-6 check families (here a Faiss-style `'err == cudaSuccess' failed` OOM on rank 0 and a thrust
    illegal address) are roots from the registry, and the other ranks' watchdog timeouts are their cascades."""
    root_side = _parsed("[2025-02-28 23:59:58] [rank0]: RuntimeError: Error in allocMemory at StandardGpuResources.cpp:"
                        "452: Error: 'err == cudaSuccess' failed: Failed to cudaMalloc 536870912 bytes on device 0 "
                        "(error 2 out of memory)", "train-12", "node-a")
    victims = _parsed("[rank1]:[E301 00:00:30.000000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
                      "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                      "Timeout(ms)=600000) ran for 600021 milliseconds before timing out.", "train-12", "node-b")
    thrust = _parsed("terminate called after throwing an instance of 'thrust::system::system_error'\n  what():  "
                     "transform: failed to synchronize: cudaErrorIllegalAddress: an illegal memory access was "
                     "encountered", "train-13", "node-c")
    assert [(e.labels["family"], e.labels["role"]) for e in root_side + thrust] == [
        ("cuda_check_failed", "root"), ("thrust_error", "root")]
    assert [e.labels["role"] for e in victims] == ["cascade"]
    cascade = analyze_cascade(root_side + victims)
    assert cascade is not None and cascade.root is root_side[0] and cascade.cascades == tuple(victims)
    fired = {m.rule_id for m in evaluator().evaluate(sorted(root_side + victims, key=lambda e: (e.time, e.id)))}
    assert "root-oom-then-nccl-timeout" in fired
