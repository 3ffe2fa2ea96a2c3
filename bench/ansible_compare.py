"""gpuslo beside ansible-rulebook (YAML rulebooks on Drools): the same 100,000-event fleet mix through two
single-event thresholds and one fragmentation-then-stall correlation, each engine as a whole process.

gpuslo: `gpuslo replay --dry-run --rules DIR FILE` (backtest: parse, evaluate, fold, print). ansible-rulebook
1.3.2 on drools-jpy 0.4.1: a local source plugin reads the same JSON lines, the rules' action is `debug`.
Whole process = wall time of the command; steady state = that minus the same command on an empty file (start-up:
interpreter, JVM, rule compilation). Threshold match counts must be equal. The correlation is shown but not
compared: ansible-rulebook's `timeout:` runs on arrival time, gpuslo's `within:` on event time.

Runs only where ansible-rulebook and a JDK 17 are installed (`--ansible PATH`, default: on PATH or
/tmp/ar-venv/bin/ansible-rulebook): `python3 -m venv /tmp/ar-venv && /tmp/ar-venv/bin/pip install
ansible-rulebook==1.3.2 drools-jpy==0.4.1 ansible-core` (without ansible-core, ansible-rulebook's source plugin
fails with "ansible-galaxy is not installed"). Otherwise it says so and exits 0.
Usage: .venv/bin/python bench/ansible_compare.py [--events 100000] [--ansible PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_workload import mixed  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GPUSLO_RULES = """\
rulebook: compare
version: "1.0.0"
description: the comparison rulebook of bench/ansible_compare.py
requires: ">=0.1"
slos:
  s: {service: bench, sli: bench, objective: bench, window: 1d}
rules:
  - id: frag-high
    title: fragmentation high
    slo: s
    severity: warning
    when: {event: mem_fragmentation, if: "fragmentation_ratio > 0.65"}
    group_by: [host, gpu]
    summary: "FR {{ event.attrs.fragmentation_ratio }} on {{ event.host }}"
    remediation: none
  - id: stall
    title: token stall
    slo: s
    severity: warning
    when: {event: token_stall, if: "gap_ms >= 200ms"}
    group_by: [host]
    summary: "stall {{ event.attrs.gap_ms }} ms on {{ event.host }}"
    remediation: none
  - id: frag-then-stall
    title: fragmentation then stall
    slo: s
    severity: error
    when:
      all:
        - {name: frag, event: mem_fragmentation, if: "fragmentation_ratio > 0.65"}
        - {name: stall, event: token_stall, if: "gap_ms >= 200ms"}
      same: [host, gpu]
      within: 60s
      ordered: true
    group_by: [host, gpu]
    summary: "frag then stall on {{ event.host }}"
    remediation: none
"""
ANSIBLE_RULES = """\
- name: compare
  hosts: all
  sources:
    - jsonl_file:
        path: {path}
  rules:
    - name: frag-high
      condition: event.kind == "mem_fragmentation" and event.attrs.fragmentation_ratio > 0.65
      action:
        debug:
          msg: "MATCH frag-high"
    - name: stall
      condition: event.kind == "token_stall" and event.attrs.gap_ms >= 200
      action:
        debug:
          msg: "MATCH stall"
    - name: frag-then-stall
      condition:
        all:
          - event.kind == "mem_fragmentation" and event.attrs.fragmentation_ratio > 0.65
          - >-
            event.kind == "token_stall" and event.attrs.gap_ms >= 200
            and event.host == events.m_0.host and event.gpu == events.m_0.gpu
        timeout: 60 seconds
      action:
        debug:
          msg: "MATCH frag-then-stall"
"""
SOURCE_PLUGIN = '''\
"""Feeds a JSON Lines file to ansible-rulebook, then ends the run."""
import asyncio, json


async def main(queue, args):
    with open(args["path"]) as handle:
        for line in handle:
            if line.strip():
                await queue.put(json.loads(line))
    await queue.put({"kind": "__end__"})
    await asyncio.sleep(0)
'''
SHUTDOWN_RULE = """    - name: end
      condition: event.kind == "__end__"
      action:
        shutdown:
          delay: 0
"""


def ansible_binary(given: str | None) -> str | None:
    for candidate in (given, shutil.which("ansible-rulebook"), "/tmp/ar-venv/bin/ansible-rulebook"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """Wall time and output of a command; its own folder leads PATH (ansible-rulebook runs ansible-galaxy)."""
    path = f"{Path(command[0]).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", "PATH": path})
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1) or "Terminating" in done.stderr:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.stdout + done.stderr


def gpuslo_counts(output: str) -> dict[str, int]:
    """Occurrences per rule from `replay --dry-run --format jsonl` (one line per violation)."""
    counts: dict[str, int] = {}
    for line in output.splitlines():
        if line.startswith("{"):
            item = json.loads(line)
            counts[item["rule"]] = counts.get(item["rule"], 0) + int(item.get("count", 1))
    return counts


def ansible_counts(output: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rule in re.findall(r"MATCH ([a-z-]+)", output):
        counts[rule] = counts.get(rule, 0) + 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=int(os.environ.get("GPUSLO_BENCH_EVENTS", 100_000)))
    parser.add_argument("--ansible", default=None)
    args = parser.parse_args(argv)
    if os.environ.get("GPUSLO_BENCH_QUICK"):
        args.events = min(args.events, 10_000)
    ansible = ansible_binary(args.ansible)
    if ansible is None or shutil.which("java") is None:
        print("ansible-rulebook or a JDK is not installed here: the comparison is skipped (see this file's "
              "docstring to install them)")
        return 0
    gpuslo = str(Path(sys.executable).with_name("gpuslo"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "rules").mkdir()
        (work / "rules" / "compare.yaml").write_text(GPUSLO_RULES)
        (work / "sources").mkdir()
        (work / "sources" / "jsonl_file.py").write_text(SOURCE_PLUGIN)
        (work / "inventory.yml").write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n")
        figures: dict[str, dict[str, object]] = {}
        for name, count in (("empty", 0), ("full", args.events)):
            data = work / f"{name}.jsonl"
            data.write_text("".join(json.dumps(e) + "\n" for e in mixed(count, seed=11)))
            (work / f"{name}.yml").write_text(ANSIBLE_RULES.format(path=data) + SHUTDOWN_RULE)
            g_time, g_out = timed([gpuslo, "replay", "--dry-run", "--rules", str(work / "rules"), "--format",
                                   "jsonl", str(data)], work)
            a_time, a_out = timed([ansible, "-r", str(work / f"{name}.yml"), "-S", str(work / "sources"), "-i",
                                   str(work / "inventory.yml")], work)
            figures[name] = {"gpuslo_s": g_time, "ansible_s": a_time, "gpuslo": gpuslo_counts(g_out),
                             "ansible": ansible_counts(a_out)}
    full, empty = figures["full"], figures["empty"]
    whole = float(full["ansible_s"]) / float(full["gpuslo_s"])  # type: ignore[arg-type]
    gpuslo_steady = float(full["gpuslo_s"]) - float(empty["gpuslo_s"])  # type: ignore[arg-type]
    ansible_steady = float(full["ansible_s"]) - float(empty["ansible_s"])  # type: ignore[arg-type]
    g_counts, a_counts = full["gpuslo"], full["ansible"]
    same = all(g_counts.get(r, 0) == a_counts.get(r, 0) for r in ("frag-high", "stall"))  # type: ignore[union-attr]
    print(f"events: {args.events}")
    print(f"start-up (empty file): gpuslo {empty['gpuslo_s']:.2f} s, ansible-rulebook {empty['ansible_s']:.2f} s")
    print(f"whole process: gpuslo {full['gpuslo_s']:.2f} s, ansible-rulebook {full['ansible_s']:.2f} s "
          f"-> gpuslo {whole:.1f}x faster (target >= 5x)")
    if gpuslo_steady > 0.2 and ansible_steady > 0:
        print(f"steady state (minus start-up): gpuslo {gpuslo_steady:.2f} s, ansible-rulebook {ansible_steady:.2f} s"
              f" -> gpuslo {ansible_steady / gpuslo_steady:.1f}x faster")
    else:
        print("steady state: within the start-up's noise at this size (use --events 100000)")
    print(f"matches: gpuslo {g_counts}, ansible-rulebook {a_counts}; thresholds identical: {same}")
    print("note: frag-then-stall differs by design (ansible's timeout is arrival time, gpuslo's within event time)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
