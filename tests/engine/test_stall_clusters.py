"""Clustering of stall causes on the H200 recording: clusters match the injected phases, their ids are stable,
a saved model assigns new stalls, and `gpuslo stalls cluster` prints and saves them."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType

from click.testing import CliRunner

from gpuslo.cli.main import main
from gpuslo.engine.events import parse_event
from gpuslo.engine.stall_clusters import assign, cluster, features, name_of

RECORDING = Path(__file__).resolve().parents[2] / "examples" / "incidents" / "h200-stall-attribution.jsonl"
PHASE_CLUSTER = {"cpu": "cpu-starvation", "kernel": "kernel-io", "network": "network-delay",
                 "alloc": "allocator-flush", "gpu": "gpu-busy"}  # gpu: a side stream of the serving process


def _events():
    return [parse_event(json.loads(line)) for line in RECORDING.read_text().splitlines() if line.strip()]


def test_clusters_match_the_injected_phases():
    events = _events()
    result = cluster(events)
    assert [(c.id, c.count) for c in result.clusters] == [
        ("cpu-starvation", 25), ("gpu-busy", 19), ("kernel-io", 18), ("network-delay", 10), ("allocator-flush", 17),
        ("noise", 1)]
    assert abs(sum(c.time_share for c in result.clusters) - 1) < 1e-3
    pairs = Counter((e.labels["injected"], result.labels[e.id]) for e in events if e.id in result.labels)
    # each phase lands in its own cluster only (one short stall of the gpu phase is DBSCAN's noise)
    assert all(PHASE_CLUSTER[phase] == cid for phase, cid in pairs if cid != "noise")
    assert pairs[("gpu", "noise")] == 1 and sum(pairs.values()) == 90
    assert len(result.points) == 90


def test_ids_are_stable_across_runs_and_input_order():
    events = _events()
    first = cluster(events)
    shuffled = events[:]
    random.Random(7).shuffle(shuffled)
    again = cluster(shuffled[: len(shuffled) - 10])  # another run, fewer stalls
    assert {c.id: c.name for c in again.clusters} == {c.id: c.name for c in first.clusters}
    assert all(again.labels[sid] == first.labels[sid] for sid in again.labels)


def test_names_follow_the_dominant_features():
    base = {f"{s}_share": 0.0 for s in ("network", "scheduler", "kernel", "driver", "gpu", "compute", "unattributed")}
    extra = {"sm_active": 0.0, "dram_bw": 0.0, "other_sm_share": 0.0, "fragmentation_ratio": 0.0,
             "alloc_retries": 0.0}
    assert name_of({**base, **extra, "gpu_share": 0.9, "other_sm_share": 0.95})[0] == "gpu-contention"
    assert name_of({**base, **extra, "gpu_share": 0.9})[0] == "gpu-busy"
    assert name_of({**base, **extra, "driver_share": 0.8, "fragmentation_ratio": 0.9})[1].startswith(
        "Allocator flush-and-retry")


def test_fragmentation_before_the_stall_is_a_feature():
    stall = next(e for e in _events() if e.labels["injected"] == "alloc" and "attribution.dominant" in e.attrs)
    before = (stall.time - timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    frag = parse_event({"id": "fr", "kind": "mem_fragmentation", "time": before, "host": stall.host,
                        "gpu": stall.gpu, "attrs": {"fragmentation_ratio": 0.97, "alloc_retries": 1}})
    assert features(stall, [frag])["fragmentation_ratio"] == 0.97 and features(stall)["fragmentation_ratio"] == 0


def test_a_saved_model_assigns_new_stalls(tmp_path):
    events = _events()
    model = json.loads(json.dumps(cluster(events).to_dict()))
    cpu = next(e for e in events if e.labels["injected"] == "cpu" and "attribution.dominant" in e.attrs)
    assert assign(cpu, model) == "cpu-starvation"
    odd = replace(cpu, attrs=MappingProxyType({**cpu.attrs, "attribution.scheduler_ms": 0.0,
                                              "attribution.gpu_ms": cpu.attrs["gap_ms"]}))
    assert assign(odd, model) is None  # far from every cluster: no id rather than a wrong one


def test_cli_prints_and_saves_the_clusters(tmp_path):
    out = tmp_path / "model.json"
    result = CliRunner().invoke(main, ["stalls", "cluster", "--events", str(RECORDING), "--model-out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "90 attributed stalls in 6 clusters"
    assert "cpu-starvation" in result.output and "CPU starvation of the engine thread" in result.output
    assert [c["id"] for c in json.loads(out.read_text())["clusters"]][0] == "cpu-starvation"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "token_stall"}\n')
    failed = CliRunner().invoke(main, ["stalls", "cluster", "--events", str(bad)])
    assert failed.exit_code == 2 and f"{bad}:1: not an event" in failed.output


def test_the_nodes_cluster_assignment_agrees_with_the_engines(tmp_path):
    from gpuslo.probes.attribution.clusters import load, nearest, vector

    events = _events()
    path = tmp_path / "model.json"
    path.write_text(json.dumps(cluster(events).to_dict()))
    model = load(str(path))
    for stall in (e for e in events if "attribution.dominant" in e.attrs):
        assert vector(stall.attrs) == features(stall)
        assert nearest(stall.attrs, model) == assign(stall, model)
