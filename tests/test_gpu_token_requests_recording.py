"""The token run recorded on the H200 with request events (scripts/gpu-tokens.sh, 2026-11-29 13:27 UTC).

examples/incidents/h200-token-requests.jsonl is what `gpuslo serve` stored: `gpuslo probe tokens --gpu 0`
against a random-weight Llama streaming over SSE while its allocator fragments, now with token_request events
(start, first_token, done). Every first token came within 10 s, so first-token-missing stayed quiet there; the
same recording with the first tokens taken out must raise it once per request, and nothing else may change.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.engine.violations import Match

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "examples" / "incidents" / "h200-token-requests.jsonl"
# What the server stored on the H200 (h200-tokens-violations.json of that run): occurrences per rule.
GPU_RUN_OCCURRENCES = {"fragmentation-high": 130, "fragmentation-then-stall": 18, "token-stall": 18, "itl-p99-high": 5}


@pytest.fixture(scope="module")
def events() -> list[Event]:
    lines = RECORDING.read_text().splitlines()
    return sorted((parse_event(json.loads(line)) for line in lines if line.strip()), key=lambda e: (e.time, e.id))


def _replay(events: list[Event]) -> list[Match]:
    rulebooks, problems = load_directory(ROOT / "rules")
    assert not problems, problems
    evaluator = RuleEvaluator()
    evaluator.load(rulebooks)
    matches = evaluator.evaluate(events)
    return matches + evaluator.tick(events[-1].timestamp + 60)  # past every 10 s the last requests had


def _phases(events: list[Event]) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}
    for event in events:
        if event.kind == "token_request":
            seen.setdefault(event.attrs["request_id"], set()).add(event.attrs["phase"])
    return seen


def test_every_request_sent_start_and_first_token_and_the_finished_ones_done(events: list[Event]) -> None:
    phases = _phases(events)
    assert len(phases) == 20
    assert all({"start", "first_token"} <= seen for seen in phases.values())
    finished = [rid for rid, seen in phases.items() if "done" in seen]
    assert len(finished) == sum(e.kind == "token_latency" for e in events) == 19  # the phase deadline cut one
    ttft = [e.attrs["ttft_ms"] for e in events if e.kind == "token_request" and e.attrs["phase"] == "first_token"]
    assert max(ttft) < 10_000


def test_replaying_raises_what_the_server_stored_and_no_first_token_alarm(events: list[Event]) -> None:
    counts = Counter(m.rule_id for m in _replay(events))
    assert {rule: counts[rule] for rule in GPU_RUN_OCCURRENCES} == GPU_RUN_OCCURRENCES
    assert counts["first-token-missing"] == 0


def test_without_its_first_tokens_every_request_raises_first_token_missing_once(events: list[Event]) -> None:
    starved = [e for e in events if not (e.kind == "token_request" and e.attrs["phase"] in ("first_token", "done"))]
    fired = [m for m in _replay(starved) if m.rule_id == "first-token-missing"]
    assert sorted(m.explanation.evidence[0].attrs["request_id"] for m in fired) == sorted(_phases(events))
    assert all(m.explanation.evidence[0].attrs["phase"] == "start" for m in fired)
