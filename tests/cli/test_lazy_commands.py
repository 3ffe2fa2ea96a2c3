"""Subcommands written in their own modules are imported when used: `replay --dry-run` starts without the alert
deliveries, the probes, the database layer or the web app, and every command still loads under its name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from gpuslo.cli.lazy_commands import LazyCommands
from gpuslo.cli.main import main

RULES = """\
rulebook: tiny
version: "1.0.0"
description: one threshold
requires: ">=0.1"
slos:
  s: {service: t, sli: t, objective: t, window: 1d}
rules:
  - id: stall
    title: token stall
    slo: s
    severity: warning
    when: {event: token_stall, if: "gap_ms >= 200ms"}
    group_by: [host]
    summary: "stall {{ event.attrs.gap_ms }} ms on {{ event.host }}"
    remediation: none
"""
HEAVY = ("gpuslo.engine.alerts", "gpuslo.engine.store", "gpuslo.probes", "gpuslo.web", "sqlalchemy", "flask",
         "httpx", "apscheduler")
PROBE = """
import json, sys
from gpuslo.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _groups(group: click.Group, prefix: str = "gpuslo"):
    yield prefix, group
    for name in list(group.commands):
        command = group.commands[name]
        if isinstance(command, click.Group):
            yield from _groups(command, f"{prefix} {name}")


def test_dry_replay_imports_none_of_the_other_commands_parts(tmp_path: Path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "tiny.yaml").write_text(RULES)
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"id": "e1", "kind": "token_stall", "time": "2026-01-01T00:00:00Z", "host": "h1",
                                  "attrs": {"gap_ms": 450}}) + "\n")
    done = subprocess.run([sys.executable, "-c", PROBE, "replay", "--dry-run", "--rules", str(tmp_path / "rules"),
                           "--format", "jsonl", str(events)], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report["code"] == 0, done.stderr
    assert [json.loads(line)["rule"] for line in done.stdout.splitlines()] == ["stall"]
    loaded = [m for m in report["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []


def test_every_lazy_command_loads_under_its_own_name():
    names = []
    for prefix, group in _groups(main):
        for name in list(group.commands):
            command = group.commands[name]
            assert command.name == name
            names.append(f"{prefix} {name}")
    assert {"gpuslo alerts", "gpuslo probe logs", "gpuslo rules test", "gpuslo tokens", "gpuslo worker"} <= set(names)


def test_a_lazy_entry_that_names_another_command_is_refused():
    commands = LazyCommands()
    commands.lazy("serve", "gpuslo.cli.worker:worker")
    assert list(commands) == ["serve"]
    with pytest.raises(TypeError, match="is not the click command 'serve'"):
        commands["serve"]
