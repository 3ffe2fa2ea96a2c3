"""Reading the H200 stall-attribution recordings back: their events, the signals each stall was attributed
from, and the attribution recomputed from one stall's signals (shared by the recording tests)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.probes.attribution import Attribution, attribute
from gpuslo.probes.attribution.signals import GpuSample, Interval

RULES = Path(__file__).resolve().parents[1] / "rules"


def recorded_events(path: Path) -> list[Event]:
    """The recording's events in time order."""
    lines = path.read_text().splitlines()
    return sorted((parse_event(json.loads(line)) for line in lines if line.strip()), key=lambda e: (e.time, e.id))


def recorded_signals(path: Path) -> dict[str, dict[str, Any]]:
    """The signals file: one row per attributed stall, by the stall's event id."""
    rows = (json.loads(line) for line in path.read_text().splitlines() if line)
    return {row["stall_id"]: row for row in rows}


def reattribute(row: dict[str, Any]) -> Attribution:
    """The attribution recomputed from one stall's recorded window, intervals and GPU samples."""
    samples = [GpuSample(**{**s, "processes": tuple(map(tuple, s["processes"]))}) for s in row["samples"]]
    return attribute(*row["window"], [Interval(**i) for i in row["intervals"]], samples,
                     own_pids=row["own_pids"], clock_error_ns=row["clock_error_ns"])


def stored_attribution(stall: Event) -> dict[str, Any]:
    """The `attribution.*` attributes stored with a token_stall."""
    return {k: v for k, v in stall.attrs.items() if k.startswith("attribution.")}


def fired_stall_rules(stalls: list[Event]) -> Counter[str]:
    """How often each shipped `stall-*` rule fires on `stalls` (the shipped rulebooks must include `stalls`)."""
    rulebooks, problems = load_directory(RULES)
    assert "stalls" in {r.name for r in rulebooks}, problems
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    return Counter(m.rule_id for m in evaluator.evaluate(stalls) if m.rule_id.startswith("stall-"))
