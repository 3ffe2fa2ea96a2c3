"""The labelled stall-attribution run recorded on the H200 (scripts/gpu_stall_attribution.py) stays explained.

examples/incidents/h200-stall-attribution.jsonl is every token_stall `gpuslo serve` stored in that run, each
labelled `labels.injected` with the phase (the cause injected then) and carrying the attribution probe's
`attribution.*` attributes; examples/signals/h200-stall-signals.jsonl holds the eBPF intervals, on-CPU sample
spans and NVML samples each attribution was computed from; examples/incidents/h200-stall-requests.jsonl holds
each request's token_latency with the attribution of its worst gap. The test recomputes every attribution from
those signals, checks the confusion matrix of the run (injected cause x dominant layer) and the coverage, and
replays the stalls through the shipped rules.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from attribution_recordings import fired_stall_rules, reattribute, recorded_events, recorded_signals, stored_attribution

from gpuslo.engine.events import Event, parse_event

INCIDENTS = Path(__file__).resolve().parents[1] / "examples" / "incidents"
ROOT = INCIDENTS.parents[1]
CAUSE = {"cpu": "scheduler", "network": "network", "kernel": "kernel", "alloc": "driver", "gpu": "gpu"}
LAYERS = ("network", "scheduler", "kernel", "driver", "gpu", "compute", "unattributed")
# What the H200 run measured (h200-stall-attribution.summary.json): stalls >= 200 ms per phase and layer. The
# gpu phase is cuBLAS products on a side stream of the server holding every SM ~300 ms a second; another
# process's products (gpu-process) are time-sliced with the server's kernels and made no stall of 200 ms. The
# two unprobed warm-up stalls have no attribution.
MATRIX = {("cpu", "scheduler"): 25, ("network", "network"): 10, ("gpu", "gpu"): 19, ("kernel", "kernel"): 18,
          ("alloc", "driver"): 5, ("warmup", "unattributed"): 2}


@pytest.fixture(scope="module")
def stalls() -> list[Event]:
    return recorded_events(INCIDENTS / "h200-stall-attribution.jsonl")


@pytest.fixture(scope="module")
def signals() -> dict[str, dict]:
    return recorded_signals(INCIDENTS.parent / "signals" / "h200-stall-signals.jsonl")


def big(stalls: list[Event]) -> list[Event]:
    return [s for s in stalls if s.attrs["gap_ms"] >= 200]


def test_the_confusion_matrix_of_the_run(stalls):
    counts = Counter((s.labels["injected"], s.attrs.get("attribution.dominant", "unattributed")) for s in big(stalls))
    assert counts == MATRIX
    caused = [s for s in big(stalls) if s.labels["injected"] in CAUSE]
    right = [s for s in caused if s.attrs["attribution.dominant"] == CAUSE[s.labels["injected"]]]
    assert len(right) / len(caused) >= 0.9  # the target: 77 of 77 here
    assert not [s for s in big(stalls) if s.labels["injected"] == "quiet"]  # the probed quiet phase: none


def test_every_attribution_is_recomputed_from_its_signals(stalls, signals):
    attributed = [s for s in stalls if "attribution.dominant" in s.attrs]
    assert len(attributed) == len(signals) == 90
    for stall in attributed:
        row = signals[stall.id]
        found = reattribute(row)
        stored = stored_attribution(stall)
        recomputed = found.attrs()
        if "attribution.sm_active_max" not in stored:  # recorded before the peak was kept
            recomputed.pop("attribution.sm_active_max", None)
        if "attribution.compute_ms" not in stored:  # recorded before the compute share (no on-CPU signal in it)
            assert recomputed.pop("attribution.compute_ms") == 0.0
            if "attribution.evidence" in recomputed:  # nor the block I/O evidence
                recomputed["attribution.evidence"] = re.sub(r"; \d+ block requests[^;]*", "",
                                                            recomputed["attribution.evidence"])
        assert recomputed == stored, stall.id


def test_the_time_split_adds_up_and_the_evidence_names_the_cause(stalls):
    for stall in big(stalls):
        a = stall.attrs
        if "attribution.dominant" not in a:
            continue
        assert sum(a[f"attribution.{x}_ms"] for x in LAYERS) == pytest.approx(a["gap_ms"], abs=0.02)
        assert a["attribution.clock_error_us"] < 1.0  # the offset's bound: under a microsecond on the H200
        evidence = a["attribution.evidence"]
        expected = {"cpu": "runnable", "network": "the server sent on time", "kernel": "fsync",
                    "alloc": "allocation/free calls", "gpu": "inside the CUDA driver"}[stall.labels["injected"]]
        assert expected in evidence or (stall.labels["injected"] == "kernel" and "write" in evidence), evidence
        if stall.labels["injected"] == "gpu":  # the device was held: SM active peaked near 100 %
            assert a["attribution.sm_active_max"] >= 0.9 and "sm_active_max" in evidence


def test_coverage_as_measured(stalls):
    """The issue's target: >= 95 % of each stall's time attributed to some layer, the serving thread's own on-CPU
    work (compute) included. All 77 probed stalls of 200 ms or more reach it."""
    coverage = [s.attrs["attribution.coverage"] for s in big(stalls) if "attribution.coverage" in s.attrs]
    assert len(coverage) == 77 and min(coverage) >= 0.95
    assert sum(coverage) / len(coverage) > 0.999  # 0.9997; min 0.9842
    # the engine thread's own work between two tokens is inside every server-side gap (not the network phase's:
    # there the server sent on time and the whole gap is the network's)
    server_side = [s for s in big(stalls) if "attribution.coverage" in s.attrs and s.labels["injected"] != "network"]
    assert all(s.attrs["attribution.compute_ms"] > 0 for s in server_side)


def test_each_requests_worst_gap_is_attributed_to_its_phase():
    lines = (INCIDENTS / "h200-stall-requests.jsonl").read_text().splitlines()
    requests = [parse_event(json.loads(line)) for line in lines if line.strip()]
    slow = [r for r in requests if r.attrs["itl_max_ms"] >= 200 and r.labels["injected"] in CAUSE]
    assert len(slow) == 23
    assert all(r.attrs["attribution.dominant"] == CAUSE[r.labels["injected"]] for r in slow)
    assert all(r.attrs["attribution.coverage"] >= 0.95 for r in slow)


def test_replayed_stalls_fire_the_rule_of_their_layer(stalls):
    fired = fired_stall_rules(stalls)
    by_layer = Counter(s.attrs["attribution.dominant"] for s in big(stalls)
                       if s.attrs.get("attribution.coverage", 0) >= 0.5)
    assert fired == {"stall-cpu-starvation": by_layer["scheduler"], "stall-network": by_layer["network"],
                     "stall-kernel": by_layer["kernel"], "stall-driver": by_layer["driver"],
                     "stall-gpu-contention": by_layer["gpu"]}
