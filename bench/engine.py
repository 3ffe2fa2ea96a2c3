"""Engine benchmark: raw durable_rules vs gpuslo's evaluator, HTTP ingest end to end, latency, bounded memory.

Run: .venv/bin/python bench/engine.py [--quick] [--json OUT] [--no-write] [--no-capacity] [--only d]. A full run
writes the section "Engine (bench/engine.py)" of bench/RESULTS.md; the last line printed holds the ratios against
the targets of issue 17, all measured within this run: b/a0 >= 0.4 (CPU); c/b >= 0.5 on SQLite and >= 0.35 on PostgreSQL
(events/s); (d) at 1,000 events/s p99 <= 50 ms on the fleet mix and <= 100 ms on the stress stream (every event
raises a violation), and the capacity (the highest rate at p99 <= 50 ms); (e) <= 50 MB RSS growth. It exits
non-zero when any part stored other occurrences, per rule, than a reference evaluation of the same events.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import engine_http
import engine_workload as workload
from durable import engine as durable_engine  # type: ignore[import-untyped]

from gpuslo.engine import matcher
from gpuslo.engine.events import Event
from gpuslo.engine.plan import Plan, plan_rulebook
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import RuleEvaluator

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
SECTION = "## Engine (bench/engine.py)"
BATCH = 500  # the runtime evaluates the queue in batches of this size
# What cProfile and per-function timers showed on 2026-11-29 (scripts not kept; rerun cProfile to refresh).
PROFILE = """Where the time goes (cProfile, py-spy --gil and per-function CPU timers; 2026-11-29):
- (b) gpuslo drives durable_rules' C matcher directly (engine/matcher.py): the Host's glue (two or three
  `json.dumps` per assert and retract, the state document parsed and rewritten around every action, an
  exception that serializes again for every fact no rule takes) was most of (a) and of the old (b)
  (27.4 µs/event, b/a 0.59 at 11:17). What gpuslo adds over the C floor (a0) now: a full Match for each
  firing (~50 µs: the sandboxed Jinja render ~30 µs of it, condition explanation, causal chain), the fact
  build from per-rulebook field tables, the windows. Event.timestamp is computed once per event (windows
  compare it many times: 32 % of evaluation in the every-event-raises stream before).
- (c) was 4.7-5.9k events/s on SQLite at 11:17-11:54. In order of what it bought: clears resolved with one
  query per rule instead of one SELECT of a whole ORM row per clear (17.7 % of the run's GIL time); the
  engine's write path with Core statements built once instead of ORM rows (store CPU per 500-event batch
  30 -> 8 ms); the POST path (a generated validator per schema, orjson for bodies, canonical stored JSON and
  responses, one insert per batch, unnest ... ON CONFLICT on PostgreSQL: 57 -> 32 µs CPU per event on
  SQLite, 121 -> 51 on PostgreSQL); reading the body in pieces no larger than it is (werkzeug's read(n)
  zero-filled an n = 8 MiB buffer per POST); `gc.freeze()` once the server is up (full collections rescanned
  the start-up objects from HTTP threads: ~14 %); the load generator moved out of the server's interpreter.
- (d) fleet mix: the faster engine and write path alone bring p99 to ~20-30 ms. The every-event-raises
  stream (1.5 matches per event, 1,000 folds per second) was CPU-bound in one interpreter (per 10 events
  ~1.4 ms ingest, 1.8 ms evaluation, 4.5 ms storing: POSTs fell behind, p99 1-3 s). Adaptive batching fixed
  most of it: a batch that took over 4 ms makes the engine wait 8 ms before the next, so two or more POSTs
  share one evaluation and one store transaction (CPU of the run 10.4 -> 7.4 s); light load never waits.
  Then the garbage collector: with the default thresholds a full collection (20-80 ms) ran every ~2 s; serve
  now collects less often (cli/serve.py GC_THRESHOLDS), which took p99 from 131-152 to 55-76 ms in 15 s runs.
  At the evidence cap every batch trimmed after reading all 200 positions of each violation it touched; it
  now reads only those a trim can reach, and SQLite searches the violations index instead of scanning the
  table (a row-value IN list alone defeated it). What is left there is statement overhead per batch, the
  Match build and the ingest commits' fsync (the POST holds the write lock meanwhile); the process runs at
  ~70 % of one core there, so its tail swings with the shared VM: p99 34, 61, 97 and 469 ms in four 15 s
  runs of the same build (the verdict line calls it d_stress; the target line is the fleet mix). Writers of the
  process queue on a lock in Database instead of in SQLite's sleeping busy handler (a fix from 11:10), and
  the engine's commits for stored events skip the fsync (why no durability is lost: engine/store/db.py).
"""


def shipped_rulebooks() -> list[Rulebook]:
    good, problems = load_directory(ROOT / "rules")
    if problems:
        raise SystemExit("shipped rulebooks do not load: " + "; ".join(map(str, problems)))
    return list(good)


class _BaselineHost(durable_engine.Host):  # type: ignore[misc]
    """A plain durable_rules host whose actions only note their name; no dispatcher threads (like the runtime)."""

    def __init__(self) -> None:
        self.fired: list[str] = []
        super().__init__()

    def get_action(self, action_name: str) -> Callable[[Any], None]:
        fired = self.fired
        return lambda _closure: fired.append(action_name)

    def _run(self) -> None:
        """Both sides run without durable's background timer threads, so neither pays for them."""


def baseline_host(rulebooks: Sequence[Rulebook]) -> tuple[_BaselineHost, list[Plan]]:
    """A fresh durable_rules host with every compiled rulebook registered on it."""
    host = _BaselineHost()
    units: list[Plan] = []
    for rulebook in rulebooks:
        unit = plan_rulebook(rulebook, ruleset=f"bench_baseline_{rulebook.name}")
        host.set_rulesets({unit.ruleset: matcher.definition(unit)})
        units.append(unit)
    return host, units


def fact_builder(rulebooks: Sequence[Rulebook]) -> RuleEvaluator:
    """An evaluator used only to build facts: (a) and (a0) assert exactly the facts (b) asserts."""
    builder = RuleEvaluator()
    builder.load(rulebooks)
    return builder


def baseline_facts(units: Sequence[Plan], builder: RuleEvaluator,
                   events: Sequence[Event]) -> list[tuple[str, dict[str, Any]]]:
    """Every fact the runtime would assert for the events, built once up front, named for the baseline host."""
    by_rulebook = {unit.rulebook.name: unit.ruleset for unit in units}
    return [(by_rulebook[ruleset.name.split("@", 1)[0]], fact)
            for event in events for ruleset, fact in builder.facts(event)]


def core_facts(builder: RuleEvaluator, events: Sequence[Event]) -> list[tuple[matcher.Ruleset, str]]:
    """The same facts as JSON texts for the builder's own rulesets in the C core, encoded up front."""
    return [(ruleset, matcher.encode(fact)) for event in events for ruleset, fact in builder.facts(event)]


def run_core(facts: Sequence[tuple[matcher.Ruleset, str]]) -> tuple[float, float, int]:
    """(a0): the bare C calls gpuslo makes for those facts (assert; retract what was taken); wall, CPU, actions."""
    actions = 0
    wall, cpu = time.perf_counter(), time.thread_time()
    for ruleset, text in facts:
        fired = matcher.assert_fact(ruleset, text)
        if fired is not None:
            actions += len(fired) + len(matcher.retract_fact(ruleset, text))
    return time.perf_counter() - wall, time.thread_time() - cpu, actions


def run_baseline(host: _BaselineHost, facts: Sequence[tuple[str, dict[str, Any]]],
                 retract_all: bool = False) -> tuple[float, float]:
    """(a): assert each fact and retract it, as the runtime does; returns (wall, CPU) seconds.

    The runtime retracts only facts the engine took (an unhandled fact is not stored); `retract_all`
    retracts every fact, which is what the runtime did before that was measured.
    """
    not_handled = durable_engine.MessageNotHandledException
    host.fired.clear()
    wall, cpu = time.perf_counter(), time.thread_time()
    for ruleset, fact in facts:
        try:
            host.assert_fact(ruleset, fact)
        except not_handled:
            if not retract_all:
                continue
        try:
            host.retract_fact(ruleset, fact)
        except not_handled:
            pass
    return time.perf_counter() - wall, time.thread_time() - cpu


def run_evaluator(rulebooks: Sequence[Rulebook], events: Sequence[Event],
                  warm_up: Sequence[Event] = ()) -> tuple[float, float, int]:
    """(b): a fresh RuleEvaluator over the events in runtime-sized batches; returns wall, CPU seconds, matches.

    `warm_up` events (a day earlier, so they have left every window before the measured ones arrive) are
    evaluated first, untimed: a service compiles each summary template once, not once per benchmark run.
    """
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    evaluator.evaluate(warm_up)
    matches = 0
    wall, cpu = time.perf_counter(), time.thread_time()
    for start in range(0, len(events), BATCH):
        found = evaluator.evaluate(events[start:start + BATCH])
        matches += len(found)
        for match in {(m.rule_id, m.group_key): m for m in found}.values():
            match.summary  # noqa: B018  # rendered at first read: the store reads the latest of each violation
    return time.perf_counter() - wall, time.thread_time() - cpu, matches


def engine_parts(rulebooks: Sequence[Rulebook], count: int, reps: int) -> dict[str, Any]:
    """(a) and (b) on the same events, alternating repetitions; the best of each counts (shared, noisy VM)."""
    items = workload.mixed(count)
    workload.check_fast_build(items)
    events = [workload.to_event(item) for item in items]
    warm_up = [workload.to_event(item) for item in workload.mixed(3000, seed=3, prefix="warm",
                                                                   start=workload.T0 - 86_400)]
    host, units = baseline_host(rulebooks)
    builder = fact_builder(rulebooks)
    facts = baseline_facts(units, builder, events)
    texts = core_facts(builder, events)
    run_baseline(host, baseline_facts(units, builder, warm_up))
    run_core(core_facts(builder, warm_up))
    a_runs, all_runs, core_runs, b_runs, matches, core_actions = [], [], [], [], 0, 0
    for _ in range(reps):
        a_runs.append(run_baseline(host, facts))
        fired = len(host.fired)
        all_runs.append(run_baseline(host, facts, retract_all=True))
        core_wall, core_cpu, core_actions = run_core(texts)
        core_runs.append((core_wall, core_cpu))
        wall, cpu, matches = run_evaluator(rulebooks, events, warm_up)
        b_runs.append((wall, cpu))
    a_wall, a_cpu = (min(r[i] for r in a_runs) for i in (0, 1))
    a0_wall, a0_cpu = (min(r[i] for r in core_runs) for i in (0, 1))
    b_wall, b_cpu = (min(r[i] for r in b_runs) for i in (0, 1))
    return {"events": count, "facts": len(facts), "reps": reps, "a_actions_fired": fired, "b_matches": matches,
            "a0_actions_fired": core_actions,
            "a_events_per_s": count / a_wall, "b_events_per_s": count / b_wall, "a0_events_per_s": count / a0_wall,
            "a_cpu_us_per_event": 1e6 * a_cpu / count, "b_cpu_us_per_event": 1e6 * b_cpu / count,
            "a0_cpu_us_per_event": 1e6 * a0_cpu / count,
            "a_retract_all_events_per_s": count / min(r[0] for r in all_runs),
            "b_over_a_wall": a_wall / b_wall, "b_over_a": a_cpu / b_cpu, "b_over_a0": a0_cpu / b_cpu,
            "a_runs_s": a_runs, "a0_runs_s": core_runs, "b_runs_s": b_runs, "a_retract_all_runs_s": all_runs}


def rss_mb() -> float:
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def memory_part(count: int) -> dict[str, Any]:
    """(e), in its own process: RSS before and after `count` never-completing events through evaluate()."""
    evaluator = RuleEvaluator()
    evaluator.load(shipped_rulebooks())
    evaluator.evaluate(list(workload.unpaired(BATCH, start=workload.T0 - 10_000)))  # warm caches, not windows
    evaluator.evaluate([])
    start_rss, samples, batch = rss_mb(), [], []
    processed, every = 0, max(count // 10, BATCH)
    started = time.perf_counter()
    for event in workload.unpaired(count):
        batch.append(event)
        if len(batch) == BATCH:
            evaluator.evaluate(batch)
            processed, batch = processed + BATCH, []
            if processed % every < BATCH:
                samples.append({"events": processed, "rss_mb": round(rss_mb(), 1), "held": evaluator.pending_facts()})
    if batch:
        evaluator.evaluate(batch)
    seconds = time.perf_counter() - started
    end_rss = rss_mb()
    return {"events": count, "event_step_s": 0.01, "start_rss_mb": start_rss, "end_rss_mb": end_rss,
            "growth_mb": end_rss - start_rss, "held_at_end": evaluator.pending_facts(), "samples": samples,
            "events_per_s": count / seconds}


def memory_in_subprocess(count: int, timeout: float) -> dict[str, Any]:
    """(e) runs in a fresh interpreter so the other parts' freed memory cannot hide growth."""
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-only", str(count)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory part failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    import os

    return f"{platform.system()} {platform.release()}, {os.cpu_count()} vCPU {cpu}, Python {platform.python_version()}"


def mismatches(figures: dict[str, Any]) -> list[str]:
    """Every part whose stored occurrences differ from the reference evaluation of the same events, and how."""
    parts = []
    for run in figures.get("runs") or [figures]:
        mode = " (engine process)" if run.get("engine_process") else ""
        parts += [(f"(c) {name}{mode}", part) for name, part in run["c"].items()]
        parts += [(f"(d) stress{mode}", run["d"]), (f"(d) fleet mix{mode}", run["d_fleet"])]
    return [f"{label}: {part['mismatch']}" for label, part in parts if part.get("mismatch")]


def _c_over_b(figures: dict[str, Any], name: str) -> float | None:
    part = figures["c"][name]
    return part["events_per_s"] / figures["ab"]["b_events_per_s"] if "events_per_s" in part else None


def verdicts(figures: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Each target of issue 17 (ratios within this run): (text, met)."""
    ab, c, d, e = figures["ab"], figures["c"], figures["d"], figures["e"]
    out = {"b/a0": (f"{ab['b_over_a0']:.2f} (CPU; target >= 0.40)", ab["b_over_a0"] >= 0.4),
           "b/a": (f"{ab['b_over_a']:.2f} (CPU; for reference)", True)}
    for name, label, target in (("sqlite", "c/b_sqlite", 0.5), ("postgresql", "c/b_pg", 0.35)):
        ratio, part = _c_over_b(figures, name), c[name]
        if ratio is None:
            out[label] = (f"n/a ({part.get('error')})", False)
            continue
        out[label] = (f"{ratio:.2f} ({part['events_per_s']:,.0f} / {ab['b_events_per_s']:,.0f} ev/s; target >= "
                      f"{target})", ratio >= target)
    out["d_fleet"] = (f"p99 {figures['d_fleet']['p99_ms']:.1f} ms at {figures['d_fleet']['target_rate']:,} ev/s, "
                      "fleet mix (target <= 50)", figures["d_fleet"]["p99_ms"] <= 50)
    out["d_stress"] = (f"p99 {d['p99_ms']:.1f} ms at {d['target_rate']:,} ev/s, every event raises a violation "
                       "(target <= 100)", d["p99_ms"] <= 100)
    for stream, capacity in figures.get("capacity", {}).items():
        share = capacity["rate"] / ab["b_events_per_s"]
        out[f"cap_{stream}"] = (f"{capacity['rate']:,} ev/s at p99 <= 50 ms ({share:.3f} of b; for reference)", True)
    out["e_growth"] = (f"{e['growth_mb']:.1f} MB over {e['events']:,} events (target <= 50)", e["growth_mb"] <= 50)
    wrong = mismatches(figures)
    out["exact"] = ("every part stored the reference's occurrences" if not wrong else "; ".join(wrong), not wrong)
    return out


def ratio_line(figures: dict[str, Any]) -> str:
    ab, d, e = figures["ab"], figures["d"], figures["e"]
    cb = {name: _c_over_b(figures, name) for name in ("sqlite", "postgresql")}
    shown = {name: "n/a" if r is None else f"{r:.2f}" for name, r in cb.items()}
    return (f"ratios: b/a0={ab['b_over_a0']:.2f} c/b_sqlite={shown['sqlite']} c/b_pg={shown['postgresql']} "
            f"d_fleet_p99={figures['d_fleet']['p99_ms']:.0f}ms d_stress_p99={d['p99_ms']:.0f}ms "
            f"e_growth={e['growth_mb']:.0f}MB exact={'yes' if not mismatches(figures) else 'NO'} "
            f"load={figures.get('load', '?')}")


def run_line(figures: dict[str, Any], run: dict[str, Any]) -> str:
    """One run of (c) and (d) with its engine mode, as ratios to this run's (b)."""
    b = figures["ab"]["b_events_per_s"]
    cb = {name: (f"{part['events_per_s'] / b:.3f} ({part['events_per_s']:,.0f} ev/s; CPU µs/event server "
                 f"{part['server_cpu_us_per_event']:.0f}, engine process {part['engine_cpu_us_per_event']:.0f})"
                 if "events_per_s" in part else "n/a") for name, part in run["c"].items()}
    wrong = [p.get("mismatch") for p in (*run["c"].values(), run["d"], run["d_fleet"]) if p.get("mismatch")]
    return (f"{'process ' if run['engine_process'] else 'embedded'} c/b_sqlite={cb['sqlite']} "
            f"c/b_pg={cb['postgresql']} d_fleet p50/p99={run['d_fleet']['p50_ms']:.1f}/"
            f"{run['d_fleet']['p99_ms']:.1f}ms d_stress p50/p99={run['d']['p50_ms']:.1f}/{run['d']['p99_ms']:.1f}ms "
            f"exact={'yes' if not wrong else 'NO'} load={run['load']}")


def markdown(figures: dict[str, Any], command: str) -> str:
    ab, c, d, e = figures["ab"], figures["c"], figures["d"], figures["e"]
    checks = verdicts(figures)
    mark = {True: "met", False: "**not met**"}
    rows = [
        ("(a) durable_rules' Python API: Host.assert_fact (+ retract of what it took), shipped rulebooks",
         f"{ab['a_events_per_s']:,.0f} ev/s wall; {ab['a_cpu_us_per_event']:.1f} µs CPU/event "
         f"({ab['facts']:,} facts for {ab['events']:,} events, {ab['a_actions_fired']:,} actions)", "baseline"),
        ("(a') the same, retracting every fact (what the runtime did before the 2026-11-29 11:17 run)",
         f"{ab['a_retract_all_events_per_s']:,.0f} ev/s wall", "for reference"),
        ("(a0) the bare C calls gpuslo's matcher makes for the same facts, JSON encoded up front",
         f"{ab['a0_events_per_s']:,.0f} ev/s wall; {ab['a0_cpu_us_per_event']:.1f} µs CPU/event "
         f"({ab['a0_actions_fired']:,} actions)", "floor"),
        ("(b) gpuslo RuleEvaluator.evaluate, same events", f"{ab['b_events_per_s']:,.0f} ev/s wall; "
         f"{ab['b_cpu_us_per_event']:.1f} µs CPU/event ({ab['b_matches']:,} matches); wall ratio "
         f"{ab['b_over_a_wall']:.2f}; b/a (CPU) {checks['b/a'][0]}",
         f"b/a0 {checks['b/a0'][0]}: {mark[checks['b/a0'][1]]}"),
    ]
    for name in ("sqlite", "postgresql"):
        part = c[name]
        if "events_per_s" not in part:
            rows.append((f"(c) HTTP → engine → stored, {name}", f"not measured: {part.get('error')}", "-"))
            continue
        check = checks["c/b_sqlite" if name == "sqlite" else "c/b_pg"]
        target = f"c/b {check[0]}: {mark[check[1]]}"
        rows.append((f"(c) HTTP ingest → engine → stored, {name}, batches of {part['batch']}",
                     f"{part['events_per_s']:,.0f} ev/s ({part['events']:,} events; POSTs alone "
                     f"{part['ingest_events_per_s']:,.0f} ev/s; {part['violations']:,} violations, "
                     f"{part['occurrences']:,} occurrences, {part['expected_matches']:,} expected"
                     f"{'; MISMATCH ' + part['mismatch'] if part.get('mismatch') else ', every rule exact'})",
                     target))
    for part, label, limit in ((figures["d_fleet"], "fleet mix (the workload of (a)-(c))", 50),
                               (d, "stress: every event raises a violation", 100)):
        met = part["p99_ms"] <= limit
        rows.append((f"(d) event → stored violation, {part['target_rate']:,} ev/s, {label} "
                     f"({part['per_post']} per POST)",
                     f"p50 {part['p50_ms']:.1f} ms, p99 {part['p99_ms']:.1f} ms, max {part['max_ms']:.1f} ms "
                     f"({part['raising']:,} of {part['events']:,} events raised one; POSTs achieved "
                     f"{part['achieved_rate']:,.0f} ev/s; {part['occurrences']:,} occurrences"
                     f"{', MISMATCH ' + part['mismatch'] if part.get('mismatch') else ', exact'})",
                     f"p99 target <= {limit} ms: {mark[met]}"))
    for stream, capacity in figures.get("capacity", {}).items():
        rows.append((f"(d) capacity, {stream}: the highest rate tried whose p99 stayed <= 50 ms",
                     f"{capacity['rate']:,} ev/s ({capacity['rate'] / ab['b_events_per_s']:.3f} of b); tried "
                     + ", ".join(f"{r:,}: {p:.0f} ms" for r, p in capacity["tried"]), "for reference"))
    rows.append(("(e) RSS over never-completing correlation events (RuleEvaluator)",
                 f"{e['start_rss_mb']:.1f} → {e['end_rss_mb']:.1f} MB, growth {e['growth_mb']:.1f} MB; "
                 f"{e['held_at_end']:,} events held in windows at the end ({e['events_per_s']:,.0f} ev/s)",
                 f"{checks['e_growth'][0]}: {mark[checks['e_growth'][1]]}"))
    table = "\n".join(f"| {a} | {b} | {v} |" for a, b, v in rows)
    samples = ", ".join(f"{s['events']:,}: {s['rss_mb']} MB / {s['held']:,} held" for s in e["samples"])
    return f"""{SECTION}

Date: {figures['date']}. Machine: {figures['machine']} (a shared VM: expect ±30 % run to run).
Load (`uptime`) at the start: {figures.get('load', '?')}; at the end: {figures.get('load_end', '?')}.
Command: `{command}` ({figures['wall_s']:.0f} s).

| part | measured | target |
|---|---|---|
{table}

Method:
- Workload: a fleet-like mix (36 % token_latency, 30 % mem_fragmentation, 20 % probe_status, 12 % token_stall,
  2 % error kinds; 64 hosts × 8 GPUs; event time +1 ms per event) through all shipped rulebooks.
- (a) asserts through durable_rules' public Python API (`Host.assert_fact`/`retract_fact` on a plain Host
  without its dispatcher threads, actions that only note their name) the very fact dicts the runtime builds
  (built once up front), and retracts those the engine took; (a0) makes the bare C calls gpuslo's
  engine/matcher.py makes for the same facts, JSON-encoded up front (the floor: durable_rules' C matcher
  alone); (b) runs RuleEvaluator.evaluate on pre-built Event objects in batches of {BATCH}, after an
  untimed warm-up of 3,000 events a day earlier (templates compiled once, as in a running service). Since
  2026-11-29 (b) drives the C matcher directly, like (a0), instead of through the Host (docs/architecture.md).
  Alternating repetitions, best of {ab['reps']} each. The verdict uses CPU time of the thread
  (`time.thread_time`), which other tenants of this shared VM do not inflate; wall figures are shown too.
  (b) does strictly more than (a0): building facts, the windows, and a full Match (explanation, Jinja
  summary) for every firing.
- (c) the real Flask app under waitress on a free port, httpx posting pre-encoded JSON arrays of {c['sqlite']
  .get('batch', 500)} back to back from a client *process* of its own (bench/engine_load.py; until
  2026-11-29 a thread in the server's interpreter, whose CPU then competed for the server's GIL and counted
  as server cost). The server process keeps only the encoded bodies, not the workload's dicts, which its
  garbage collector would otherwise scan. The clock (CLOCK_MONOTONIC, shared by both processes) starts when
  the warmed-up client is told to go and stops when `core.wait_idle()` returns; "POSTs alone" ends when the
  client has its last answer. Violations are then counted in the database and their occurrences checked
  against a RuleEvaluator run on the same events. PostgreSQL is a scratch database on 127.0.0.1:5432,
  dropped afterwards. The per-client ingest rate limit is off in (c) and (d): one client stands in for a
  fleet.
- (d) {d['per_post']} events per POST every {1000 * d['per_post'] / d['target_rate']:g} ms on SQLite, paced on
  an absolute schedule by the same separate client process; latency of each event that raised a violation =
  moment the core's sink returned (after the violation rows were committed; the benchmark wraps
  `core.runtime._sink`) minus the *scheduled* send time of its POST (so a client falling behind cannot hide
  delay). Two streams: every event raising one (fragmentation 0.8 / 640 ms stall pairs on 128 GPUs, so
  each also completes fragmentation-then-stall) and the fleet mix.
- (e) in a fresh interpreter: mem_fragmentation with FR 0.70-0.94 on ever-new host/GPU pairs, event time
  +10 ms per event, no stalls, so fragmentation-then-stall never completes (fragmentation-high fires on each);
  RSS = VmRSS after gc.collect(). Samples (events: RSS / held): {samples}.

{PROFILE}"""


def write_results(text: str) -> None:
    """Replace this benchmark's section of bench/RESULTS.md, keeping the others."""
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    if SECTION in old:
        head, rest = old.split(SECTION, 1)
        following = rest.find("\n## ")
        tail = rest[following + 1:] if following >= 0 else ""
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(new, encoding="utf-8")


def uptime() -> str:
    """The load averages `uptime` prints (other tenants of the machine share its cores)."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


CAPACITY_RATES = (1000, 1500, 2000, 3000, 4000, 6000, 8000)


def capacity_part(rules_dir: Path, stream: str, seconds: float) -> dict[str, Any]:
    """The highest rate of CAPACITY_RATES, tried in order for `seconds` each, whose p99 stays <= 50 ms."""
    tried: list[tuple[int, float]] = []
    best = 0
    for rate in CAPACITY_RATES:
        part = engine_http.latency_part(rules_dir, seconds, stream=stream, rate=rate, per_post=max(10, rate // 100))
        tried.append((rate, part["p99_ms"]))
        if part["p99_ms"] > 50 or part["mismatch"]:
            break
        best = rate
    return {"rate": best, "tried": tried, "seconds": seconds}


def only_latency(seconds: float, out: Path | None) -> None:
    """(d) alone (bench/engine.py --only d): the stress stream and the fleet mix, with the server's CPU."""
    figures: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
                               "load": uptime(), "engine_process": engine_http.ENGINE_PROCESS}
    for key, stream in (("d", "incidents"), ("d_fleet", "fleet")):
        part = figures[key] = engine_http.latency_part(ROOT / "rules", seconds, stream=stream)
        print(f"{key:8} p50/p99/max {part['p50_ms']:.1f}/{part['p99_ms']:.1f}/{part['max_ms']:.1f} ms at "
              f"{part['achieved_rate']:,.0f} of {part['target_rate']:,} ev/s; server CPU "
              f"{part['server_cpu_us_per_event']:.0f} µs/event (engine process {part['engine_cpu_us_per_event']:.0f}); "
              f"{part['raising']:,} raising of "
              f"{part['events']:,}; exact={'yes' if not part['mismatch'] else 'NO: ' + part['mismatch']}", flush=True)
    figures["load_end"] = uptime()
    print(f"load {figures['load']} -> {figures['load_end']}")
    if out:
        out.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    wrong = [f"({key}) {figures[key]['mismatch']}" for key in ("d", "d_fleet") if figures[key]["mismatch"]]
    if wrong:
        raise SystemExit("FAILED: stored occurrences differ from the reference evaluation: " + "; ".join(wrong))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs; finishes in under a minute")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite bench/RESULTS.md")
    parser.add_argument("--no-capacity", action="store_true", help="skip the capacity search of (d)")
    parser.add_argument("--engine-process", choices=("off", "on", "both"), default="off",
                        help="(c) and (d) with the engine in the server's process (off), in a child process (on; the "
                             "setting engine_process), or both, alternating embedded, process, embedded, process")
    parser.add_argument("--no-memory", action="store_true", help="skip (e) (the evaluator alone; no HTTP)")
    parser.add_argument("--memory-only", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=("d",), help="only (d) at 1,000 events/s: the stress stream, then the fleet "
                        "mix (20 s each, 2 s with --quick); prints each part's figures, writes nothing")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # summary fallbacks and per-batch logs are not what is measured
    if args.memory_only:
        print(json.dumps(memory_part(args.memory_only)))
        return
    if args.only == "d":
        if args.engine_process == "both":
            parser.error("--only d takes --engine-process off or on")
        engine_http.ENGINE_PROCESS = args.engine_process == "on"
        only_latency(2.0 if args.quick else 20.0, args.json)
        return
    quick = args.quick
    started = time.perf_counter()
    rulebooks = shipped_rulebooks()
    figures: dict[str, Any] = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
                               "quick": quick, "load": uptime()}
    memory_count = 50_000 if quick else 1_000_000
    print(f"(a)/(b) engine: {'15,000' if quick else '100,000'} events ...", flush=True)
    figures["ab"] = engine_parts(rulebooks, 15_000 if quick else 100_000, 2 if quick else 3)
    modes = {"off": [False], "on": [True], "both": [False, True, False, True]}[args.engine_process]
    figures["engine_process"] = args.engine_process
    runs: list[dict[str, Any]] = []
    for in_process in modes:
        engine_http.ENGINE_PROCESS = in_process
        label = "engine process" if in_process else "embedded engine"
        print(f"(c) HTTP ingest ({label}): {'5,000' if quick else '50,000'} events per database ...", flush=True)
        run = {"engine_process": in_process, "load": uptime(),
               "c": engine_http.ingest_parts(ROOT / "rules", 5_000 if quick else 50_000)}
        print(f"(d) latency at 1,000 events/s ({label}) ...", flush=True)
        run["d"] = engine_http.latency_part(ROOT / "rules", 2.0 if quick else 20.0)
        run["d_fleet"] = engine_http.latency_part(ROOT / "rules", 2.0 if quick else 20.0, stream="fleet")
        runs.append(run)
    figures.update({key: runs[-1][key] for key in ("c", "d", "d_fleet")})
    figures["runs"] = runs
    if not (quick or args.no_capacity):
        print("(d) capacity: the highest rate at p99 <= 50 ms ...", flush=True)
        figures["capacity"] = {stream: capacity_part(ROOT / "rules", stream, 6.0) for stream in ("fleet", "incidents")}
    if args.no_memory:
        figures["e"] = {"growth_mb": float("nan"), "start_rss_mb": float("nan"), "end_rss_mb": float("nan"),
                        "held_at_end": 0, "events": 0, "events_per_s": 0.0, "samples": [], "skipped": True}
    else:
        print(f"(e) memory: {memory_count:,} never-completing events ...", flush=True)
        figures["e"] = memory_in_subprocess(memory_count, timeout=600 if quick else 1800)
    figures["wall_s"] = time.perf_counter() - started
    figures["load_end"] = uptime()
    # The file keeps the figures of a full run in one mode; --quick is the smoke check.
    if not (quick or args.no_write or args.no_memory or args.engine_process == "both"):
        write_results(markdown(figures, "python bench/engine.py"))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    for name, (text, met) in verdicts(figures).items():
        print(f"{name:10} {text}  {'ok' if met else 'SHORT'}")
    for run in runs if len(runs) > 1 else []:
        print(run_line(figures, run))
    print(ratio_line(figures))
    wrong = mismatches(figures)
    if wrong:  # a benchmark of a service that stores the wrong violations measures nothing
        raise SystemExit("FAILED: stored occurrences differ from the reference evaluation: " + "; ".join(wrong))


if __name__ == "__main__":
    main()
