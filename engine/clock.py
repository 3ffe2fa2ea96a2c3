"""The stream clock: when absence rules are checked. One abstraction drives the live engine, backtests and rule
tests; only its settings differ.

Absences fire on event time, never on the wall clock. Inside a batch, each event first fires what fell due
before it (the evaluator does this). Between batches a `Clock` says when a driver checks absences:
rule tests before every event, each event its own batch (`step_s` 0); backtests whenever event time has moved a
second, in batches of 500; the live engine whenever its thread is idle, at the stream's time, which runs on with
the time elapsed once the stream has been quiet for `idle_grace_s`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpuslo.engine.events import Event
from gpuslo.engine.violations import Match


class Evaluator(Protocol):
    """What a Feed drives (the RuleEvaluator)."""

    def evaluate(self, events: Sequence[Event]) -> list[Match]: ...

    def tick(self, now: float) -> list[Match]: ...


@dataclass(frozen=True)
class Clock:
    """How a stream's absences are checked between batches."""

    step_s: float  # check before an event once event time has moved this far since the last check (inf: never)
    batch_size: int  # events evaluated together
    idle_grace_s: float | None = None  # live only: the quiet after which stream time runs on by itself

    def stream_time(self, watermark: float, quiet_s: float) -> float:
        """The stream's event time after `quiet_s` seconds without a new event time: the newest event time,
        running on with the time elapsed beyond the grace (live); event time only otherwise.

        Not the wall clock: events that arrive late or in bulk (an agent shipping its spool after an outage,
        a replay into a live server) would all look overdue against it. The grace keeps a stream that is
        still flowing on its own event time, so the gaps between batches cannot outrun the next batch.
        """
        if self.idle_grace_s is None:
            return watermark
        return watermark + max(0.0, quiet_s - self.idle_grace_s)


LIVE = Clock(step_s=math.inf, batch_size=500, idle_grace_s=1.0)
BACKTEST = Clock(step_s=1.0, batch_size=500)  # as the live service, which ticks about once a second when idle
RULE_TESTS = Clock(step_s=0.0, batch_size=1)  # a silence that one late event ends still counts


class Feed:
    """Feeds one evaluator a stream of events under a clock (backtests, rule tests); every call returns the
    matches it produced, in order."""

    def __init__(self, evaluator: Evaluator, clock: Clock):
        self._evaluator, self._clock = evaluator, clock
        self._batch: list[Event] = []
        self._checked = -math.inf  # event time of the last check

    def push(self, event: Event) -> list[Match]:
        matches = []
        if event.timestamp >= self._checked + self._clock.step_s:
            # Check absences at this event's time before it arrives: a silence it ends still counts.
            matches = self._flush(event.timestamp)
            self._checked = event.timestamp
        self._batch.append(event)
        if len(self._batch) >= self._clock.batch_size:
            matches += self._flush(None)
        return matches

    def finish(self, until: float | None = None) -> list[Match]:
        """Evaluate what is left, then check absences at event time `until` when given."""
        return self._flush(until)

    def _flush(self, tick: float | None) -> list[Match]:
        matches = self._evaluator.evaluate(self._batch)
        self._batch = []
        return matches + (self._evaluator.tick(tick) if tick is not None else [])
