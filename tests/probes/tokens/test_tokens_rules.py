"""The active probe's token_request events, from the real streaming server, through the shipped latency rules."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpuslo.engine.events import Event
from gpuslo.engine.rulebook import load_rulebook_text
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.probes.tokens import ActiveProbeConfig, ActiveTokenProbe

LATENCY = Path(__file__).resolve().parents[3] / "rules" / "latency.yaml"


def _evaluator(for_: str) -> RuleEvaluator:
    """The shipped latency rulebook, with first-token-missing's 10 s shortened so a test can wait it out."""
    text = LATENCY.read_text(encoding="utf-8")
    assert text.count("for: 10s") == 1
    evaluator = RuleEvaluator(lateness_s=10, measure_slos=False)  # the rules only: SLO burn alerts aside
    evaluator.load([load_rulebook_text(text.replace("for: 10s", f"for: {for_}"), str(LATENCY))])
    return evaluator


def _probe(base: str, scenario: str, timeout_s: float) -> ActiveTokenProbe:
    config = ActiveProbeConfig(url=f"{base}/{scenario}", model="tiny", max_tokens=20, timeout_s=timeout_s)
    return ActiveTokenProbe(config, host="node-a")


def test_a_request_silent_past_for_fires_first_token_missing_then_fails(stream_server):
    evaluator = _evaluator("200ms")
    fired = []

    def sink(event: Event) -> None:  # each event into the engine as the probe makes it, as a live server would
        fired.extend(evaluator.evaluate([event]))

    with _probe(stream_server.base_url, "silent", timeout_s=0.5) as probe:
        events = probe.run_once(sink)
    start = events[0]
    assert [(m.rule_id, m.group["endpoint"]) for m in fired] == [("first-token-missing", probe.url),
                                                                 ("token-request-failed", probe.url)]
    missing, failed = fired
    assert [e.id for e in missing.explanation.evidence] == [start.id]
    assert start.attrs["request_id"] in missing.summary
    assert "timeout after 0.5s" in failed.summary and "after 0 tokens" in failed.summary


def test_a_request_that_streams_fires_nothing(stream_server):
    evaluator = _evaluator("200ms")
    with _probe(stream_server.base_url, "quick", timeout_s=5) as probe:
        events = probe.run_once()
    assert evaluator.evaluate(events) == []
    assert evaluator.tick(events[-1].timestamp + 60) == []


def test_the_wall_clock_fires_while_the_request_still_hangs(stream_server):
    """Ticked with the wall clock as the live server does, the alert comes while the request is in flight."""
    evaluator = _evaluator("100ms")
    started = threading.Event()

    def sink(event: Event) -> None:
        evaluator.evaluate([event])
        started.set()

    with _probe(stream_server.base_url, "silent", timeout_s=1.0) as probe:
        request = threading.Thread(target=probe.run_once, args=(sink,))
        request.start()
        try:
            assert started.wait(5)
            fired = []
            while not fired and request.is_alive():
                fired = evaluator.tick(time.time())
                time.sleep(0.02)
            in_flight = request.is_alive()
        finally:
            request.join()
    assert [m.rule_id for m in fired] == ["first-token-missing"] and in_flight
