"""One clock for the three streams: when a Feed checks absences and how the live stream time runs on."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from gpuslo.engine import matcher
from gpuslo.engine.clock import BACKTEST, LIVE, RULE_TESTS, Clock, Feed
from gpuslo.engine.events import Event
from gpuslo.engine.rulebook.operators import OPERATORS
from gpuslo.engine.violations import Match

START = datetime(2026, 1, 1, tzinfo=UTC)


class Recorder:
    """An evaluator that records the calls a Feed makes (what is under test is the Feed's schedule)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def evaluate(self, events: Sequence[Event]) -> list[Match]:
        self.calls.append(("evaluate", [e.id for e in events]))
        return []

    def tick(self, now: float) -> list[Match]:
        self.calls.append(("tick", now - START.timestamp()))
        return []


def _event(i: int, seconds: float) -> Event:
    return Event(id=f"e{i}", kind="cuda_oom", time=START + timedelta(seconds=seconds), host="h")


def _feed(clock: Clock, times: Sequence[float], until: float | None = None) -> list[tuple[str, object]]:
    recorder = Recorder()
    feed = Feed(recorder, clock)
    for i, seconds in enumerate(times):
        feed.push(_event(i, seconds))
    feed.finish(None if until is None else START.timestamp() + until)
    return recorder.calls


def test_rule_tests_tick_before_every_event_and_evaluate_each_alone():
    assert _feed(RULE_TESTS, [0, 0.5, 3], until=10) == [
        ("evaluate", []), ("tick", 0.0), ("evaluate", ["e0"]),
        ("evaluate", []), ("tick", 0.5), ("evaluate", ["e1"]),
        ("evaluate", []), ("tick", 3.0), ("evaluate", ["e2"]),
        ("evaluate", []), ("tick", 10.0)]


def test_backtests_tick_once_event_time_moved_a_second_and_batch_the_rest():
    assert _feed(BACKTEST, [0, 0.4, 0.9, 1.0, 1.5, 5]) == [
        ("evaluate", []), ("tick", 0.0),
        ("evaluate", ["e0", "e1", "e2"]), ("tick", 1.0),
        ("evaluate", ["e3", "e4"]), ("tick", 5.0),
        ("evaluate", ["e5"])]


def test_backtest_batches_hold_at_most_batch_size_events():
    calls = _feed(BACKTEST, [0.001 * i for i in range(BACKTEST.batch_size + 2)])
    sizes = [len(arg) for name, arg in calls if name == "evaluate"]  # type: ignore[arg-type]
    assert sizes == [0, BACKTEST.batch_size, 2]


def test_the_live_stream_time_runs_on_only_after_the_idle_grace():
    assert LIVE.stream_time(100.0, 0.5) == 100.0
    assert LIVE.stream_time(100.0, 3.0) == 102.0
    assert BACKTEST.stream_time(100.0, 3.0) == 100.0  # backtests and rule tests keep event time


def test_every_operator_plans_to_a_primitive_the_matcher_speaks():
    for op in OPERATORS.values():
        assert op.plan in ("eq", "in", "text") or op.plan in matcher._DIALECT, op.name
