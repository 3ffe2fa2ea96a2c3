"""Backtest (`gpuslo replay --dry-run`): folded violations, bad lines, --compare adds/removes, jsonl output."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuslo.cli.replay_dry import dry_replay
from gpuslo.engine.backtest import backtest, compare
from gpuslo.engine.errors import RulebookError
from gpuslo.engine.events import format_time
from gpuslo.engine.rulebook import load_directory

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
T0 = datetime(2026, 2, 1, tzinfo=UTC)


def _event(n: int, kind: str, at: float, **fields: Any) -> dict[str, Any]:
    envelope = {k: fields.pop(k) for k in ("host", "gpu", "pid", "job", "rank") if k in fields}
    return {"id": f"e{n}", "kind": kind, "time": format_time(T0 + timedelta(seconds=at)),
            "host": envelope.pop("host", "node-7"), **envelope, "attrs": fields}


def _recording(path: Path) -> Path:
    """Three OOMs on GPU 3 (a storm), fragmentation then a stall on GPU 3, and an unrelated stall on GPU 5."""
    events = [
        _event(1, "cuda_oom", 0, gpu=3, requested_bytes=1 << 20, free_bytes=0),
        _event(2, "cuda_oom", 30, gpu=3, requested_bytes=1 << 20, free_bytes=0),
        _event(3, "cuda_oom", 60, gpu=3, requested_bytes=1 << 20, free_bytes=0),
        _event(4, "mem_fragmentation", 70, gpu=3, fragmentation_ratio=0.7),
        _event(5, "token_stall", 75, gpu=3, gap_ms=300.0, endpoint="/v1/chat"),
        _event(6, "token_stall", 76, gpu=5, gap_ms=300.0, endpoint="/v1/chat"),
    ]
    lines = [json.dumps(e) for e in events]
    lines.insert(2, "{not json")
    lines.insert(4, json.dumps({"id": "bad", "kind": "cuda_oom"}))
    lines.append(json.dumps(events[0]))  # a duplicate id, skipped as ingest would
    lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_backtest_folds_matches_by_rule_and_group_and_reports_bad_lines(tmp_path: Path):
    books, _ = load_directory(RULES)
    (result,) = backtest(_recording(tmp_path / "events.jsonl"), [books])
    assert (result.events, result.duplicates) == (6, 1)
    assert [(b.line, b.reason.split(":")[0]) for b in result.bad_lines] == [(3, "not JSON"), (5, "not a valid event")]
    folded = {(v.rule, v.group_key): v for v in result.violations}
    assert folded[("cuda-oom", "host=node-7,gpu=3")].count == 3
    oom = folded[("cuda-oom", "host=node-7,gpu=3")]
    assert (oom.first_seen, oom.last_seen) == (T0, T0 + timedelta(seconds=60))
    assert folded[("oom-storm", "host=node-7,gpu=3")].count == 1
    assert folded[("token-stall", "host=node-7,endpoint=/v1/chat")].count == 2
    assert ("fragmentation-then-stall", "host=node-7,gpu=3") in folded
    assert not any(rule == "fragmentation-then-stall" and "gpu=5" in key for rule, key in folded)
    assert result.matches == sum(v.count for v in result.violations)


def _changed_rules(tmp_path: Path) -> Path:
    """The shipped rules with the storm raised to 4 OOMs and the token-stall threshold cut to 100 ms for GPU 5."""
    changed = tmp_path / "changed"
    shutil.copytree(RULES, changed, ignore=shutil.ignore_patterns("*.test.yaml", "conftest.py", "__pycache__"))
    memory = changed / "memory.yaml"
    memory.write_text(memory.read_text().replace("count: 3\n      event: cuda_oom", "count: 4\n      event: cuda_oom"))
    latency = changed / "latency.yaml"
    stall = "\n    summary: >-\n      {{ event.attrs.gap_ms }}"  # the token-stall rule's group_by precedes it
    text = latency.read_text()
    latency.write_text(text.replace(f"group_by: [host, endpoint]{stall}", f"group_by: [host, gpu]{stall}"))
    return changed


def test_compare_lists_what_the_changed_rulebooks_add_and_remove(tmp_path: Path):
    changed = _changed_rules(tmp_path)
    sets = [load_directory(RULES)[0], load_directory(changed)[0]]
    base, other = backtest(_recording(tmp_path / "events.jsonl"), sets)
    diff = compare(base, other)
    assert sorted(v.key for v in diff.added) == [("token-stall", "host=node-7,gpu=3"),
                                                 ("token-stall", "host=node-7,gpu=5")]
    assert sorted(v.key for v in diff.removed) == [("oom-storm", "host=node-7,gpu=3"),
                                                   ("token-stall", "host=node-7,endpoint=/v1/chat")]
    assert diff.unchanged == len(base.violations) - 2


def test_dry_run_jsonl_prints_one_object_per_violation(tmp_path: Path):
    events = _recording(tmp_path / "events.jsonl")
    run = CliRunner().invoke(dry_replay, ["--dry-run", "--rules", str(RULES), "--format", "jsonl", str(events)])
    assert run.exit_code == 1  # bad lines were skipped
    objects = [json.loads(line) for line in run.stdout.splitlines()]
    storm = next(o for o in objects if o["rule"] == "oom-storm")
    assert storm["group"] == {"host": "node-7", "gpu": 3} and storm["severity"] == "critical"
    assert storm["summary"].startswith("OOM storm on node-7 GPU 3") and storm["count"] == 1
    assert storm["first_seen"] == storm["last_seen"] == format_time(T0 + timedelta(seconds=60))
    assert {o["rule"] for o in objects} >= {"cuda-oom", "token-stall", "fragmentation-then-stall"}
    assert f"{events}:line 3: not JSON" in run.stderr and f"{events}:line 5: not a valid event" in run.stderr


def test_dry_run_text_and_compare_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    events = _recording(tmp_path / "events.jsonl")
    monkeypatch.setattr("gpuslo.cli.replay_dry.PROGRESS_MIN_BYTES", 1)  # show the bar on this small file
    text = CliRunner().invoke(dry_replay, ["--dry-run", "--rules", str(RULES), str(events)])
    assert "backtesting" in text.stderr
    lines = text.stdout.splitlines()
    assert any(line.startswith("critical oom-storm  [host=node-7,gpu=3]  x1  ") for line in lines)
    assert lines[-1].endswith("from 6 events (1 duplicate ids, 2 bad lines skipped)")
    changed = _changed_rules(tmp_path)
    diff = CliRunner().invoke(dry_replay, ["--dry-run", "--rules", str(RULES), "--compare", str(changed), str(events)])
    lines = diff.stdout.splitlines()
    assert sum(line.startswith("+ ") for line in lines) == 2 and sum(line.startswith("- ") for line in lines) == 2
    assert any(line.startswith("- critical oom-storm") for line in lines)
    assert lines[-1].startswith(f"{changed} against {RULES}: 2 added, 2 removed, ")
    jsonl = CliRunner().invoke(dry_replay, ["--dry-run", "--rules", str(RULES), "--compare", str(changed),
                                            "--format", "jsonl", str(events)])
    changes = sorted((o["change"], o["rule"]) for o in map(json.loads, jsonl.stdout.splitlines()))
    assert changes == [("added", "token-stall"), ("added", "token-stall"), ("removed", "oom-storm"),
                       ("removed", "token-stall")]


def test_a_broken_rules_folder_is_an_error(tmp_path: Path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.yaml").write_text("rulebook: x\n")
    events = _recording(tmp_path / "events.jsonl")
    with pytest.raises(RulebookError, match="missing required field 'version'"):
        CliRunner().invoke(dry_replay, ["--dry-run", "--rules", str(broken), str(events)], catch_exceptions=False)


def test_absence_rules_fire_on_event_time_during_a_backtest(tmp_path: Path):
    events = [_event(1, "probe_status", 0, probe="nvml", state="up"),
              _event(2, "probe_status", 0, host="node-8", probe="nvml", state="up"),
              _event(3, "probe_status", 100, host="node-8", probe="nvml", state="up"),
              _event(4, "probe_status", 200, host="node-8", probe="nvml", state="up"),
              _event(5, "probe_status", 250, probe="nvml", state="up")]  # ends node-7's 250 s silence
    path = tmp_path / "probes.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    (result,) = backtest(path, [load_directory(RULES)[0]])
    silent = [v for v in result.violations if v.rule == "probe-silent"]
    assert [(v.group_key, v.count) for v in silent] == [("host=node-7,probe=nvml", 1)]
