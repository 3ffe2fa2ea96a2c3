"""The rule evaluator: events become facts (facts.py) matched against each rulebook's plan (plan.py) by the
matcher (matcher.py); what fires becomes matches, windows and clears. It runs on its caller's thread: the engine
thread (engine_thread.py), a backtest or a rule test, each under its clock (clock.py).

Facts have ids the runtime owns, so every matching rule fires (an event would be consumed by the first). Facts
are retracted at once (the engine matches single facts); events that windowed rules may still join are held in
the runtime's windows until their window and the allowed lateness have passed, so the engine's memory stays
bounded.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuslo.engine import matcher
from gpuslo.engine.clock import LIVE, Clock
from gpuslo.engine.errors import EngineError, RulebookNotLoaded
from gpuslo.engine.events import Event
from gpuslo.engine.explain import SummaryRenderer, build_absence_match, build_match, group_key, group_of
from gpuslo.engine.facts import FactFields, fact_id, make_fact
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.plan import Plan, RuleAction, plan_rulebook
from gpuslo.engine.prefilter import Prefilter
from gpuslo.engine.rulebook.model import CLEAR_ALIAS, Absence, Count, Rule, Rulebook, SingleEvent
from gpuslo.engine.slo.counter import SliBatch, SloCounter, SloSeed
from gpuslo.engine.violations import Clear, Match
from gpuslo.engine.windows import Windows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineResult:
    """One evaluated batch: the events (in evaluation order), the matches they produced and the violations
    their clearing events resolve (stored after the matches)."""

    events: tuple[Event, ...]
    matches: tuple[Match, ...]
    clears: tuple[Clear, ...] = ()
    sli: SliBatch | None = None  # the SLI buckets the batch counted (engine/slo), stored in its transaction
    quarantined: tuple[tuple[Event, str], ...] = ()  # events whose evaluation raised, with the error


@dataclass(frozen=True)
class _Unit:
    """A rulebook's plan, registered in the matcher, with the event fields its facts copy."""

    plan: Plan
    ruleset: matcher.Ruleset
    fields: FactFields
    prefilter: Prefilter  # events no pattern can take skip the fact build and the core (prefilter.py)


def window_scope(rulebook: Rulebook, rule: Rule) -> str:
    """Where a rule's window state lives: the same for an unchanged rule across reloads of its rulebook."""
    fingerprint = hashlib.sha1(repr((rule.when, rule.group_by)).encode(), usedforsecurity=False).hexdigest()[:16]
    return f"{rulebook.name}|{rule.id}|{fingerprint}"


class RuleEvaluator:
    """Evaluates events against rulebook plans on the caller's thread (the engine thread, a backtest, a rule test)."""

    def __init__(self, *, lateness_s: float = 60.0, metrics: Metrics | None = None, measure_slos: bool = True,
                 max_ahead_s: float | None = None, isolate_events: bool = False,
                 wall_clock: Callable[[], float] = time.time, clock: Clock = LIVE,
                 renderer: SummaryRenderer | None = None):
        """`max_ahead_s`: the stream clock never runs ahead of `wall_clock()` by more (the live engine; None for
        backtests and rule tests, whose times are their own). `isolate_events`: an event whose evaluation raises
        is quarantined in the result instead of failing the batch. `clock`: how `stream_time` runs on.
        `renderer`: the summary renderer, shared by evaluators of one thread (a fleet worker's partitions) so
        that each summary template compiles once; by default the evaluator's own."""
        self._max_ahead_s, self._isolate, self._wall_clock = max_ahead_s, isolate_events, wall_clock
        self._clock = clock
        self._active: tuple[_Unit, ...] = ()
        self._by_kind: dict[str, tuple[_Unit, ...]] = {}  # the units that read a kind, in load order
        self._clears: list[Clear] = []  # of the batch being evaluated
        self._windows = Windows(lateness_s)
        self._scopes: dict[str, Rulebook] = {}
        self._action_scopes: dict[str, str] = {}  # action → window scope, hashed once per load, not per firing
        self._watermark = 0.0
        self._advanced_at = 0.0  # time.monotonic() when the watermark last moved forward
        self._lateness = lateness_s
        self._metrics = metrics or Metrics()
        self._renderer = renderer or SummaryRenderer()
        self.slo = SloCounter(enabled=measure_slos)  # SLI counting and burn alerts (off for rule tests)
        self._lock = threading.RLock()

    @property
    def rulebooks(self) -> tuple[Rulebook, ...]:
        return tuple(unit.plan.rulebook for unit in self._active)

    def load(self, rulebooks: Sequence[Rulebook], slo_seed: SloSeed | None = None) -> None:
        """Plan and register the rulebooks, then swap them in; on failure the old ones keep running.
        SLIs new to the evaluator start from `slo_seed` (the stored buckets)."""
        units = []
        for rulebook in rulebooks:
            try:
                plan = plan_rulebook(rulebook, ruleset=matcher.unique_name(
                    f"{rulebook.name}@{rulebook.content_hash[:12]}"))
                ruleset = matcher.register_plan(plan)
            except Exception as exc:  # noqa: BLE001 - named, so the service keeps that rulebook's last good version
                raise RulebookNotLoaded(rulebook.name, rulebook.location.file, f"{type(exc).__name__}: {exc}") from exc
            fields = FactFields.of(plan)
            units.append(_Unit(plan, ruleset, fields, Prefilter(plan, fields)))
        # each rule's scope hashed once (an action's rule is the rulebook's own Rule object: looked up by identity)
        by_rule = {id(rule): (window_scope(unit.plan.rulebook, rule), unit.plan.rulebook)
                   for unit in units for rule in unit.plan.rulebook.rules}
        scopes = dict(by_rule.values())
        action_scopes = {name: by_rule[id(action.rule)][0] if id(action.rule) in by_rule
                         else window_scope(unit.plan.rulebook, action.rule)
                         for unit in units for name, action in unit.plan.actions.items()}
        with self._lock:
            self._active = tuple(units)
            kinds = {kind for unit in units for kind in unit.plan.kinds}
            self._by_kind = {kind: tuple(u for u in units if kind in u.plan.kinds) for kind in kinds}
            self._windows.forget(set(self._scopes) - set(scopes))
            self._scopes = scopes
            self._action_scopes = action_scopes
            self.slo.load(rulebooks, slo_seed)

    def _fact(self, event: Event, unit: _Unit, timestamp: float) -> dict[str, Any]:
        return make_fact(event, unit.plan, unit.fields, timestamp)

    def facts(self, event: Event) -> list[tuple[matcher.Ruleset, dict[str, Any]]]:
        """The facts an event becomes, one per loaded rulebook that reads its kind (bench/engine.py's (a))."""
        return [(unit.ruleset, self._fact(event, unit, event.timestamp))
                for unit in self._active if event.kind in unit.plan.kinds]

    def _match_fact(self, unit: _Unit, fact: dict[str, Any]) -> list[str]:
        """Assert the fact and retract it at once; the actions it fired (none when no rule pattern took it)."""
        for _attempt in range(3):
            text = matcher.encode(fact)
            try:
                fired = matcher.assert_fact(unit.ruleset, text)
            except matcher.IdCollision:
                # 32-bit id hash collision with a pending fact: re-key and count it, never drop silently.
                self._metrics.engine_errors.labels("observed_collision").inc()
                fact["id"] = fact_id()
                continue
            if fired is None:  # an unhandled fact is not stored (bench/RESULTS.md): nothing to retract
                return []
            return fired + matcher.retract_fact(unit.ruleset, text)
        raise EngineError(f"event could not be asserted after re-keying: {fact.get('kind')}")

    def evaluate(self, events: Sequence[Event]) -> list[Match]:
        """Run the events through every rulebook in order; return the matches (clears are dropped)."""
        return list(self.evaluate_batch(events).matches)

    def evaluate_batch(self, events: Sequence[Event]) -> EngineResult:
        """Run the events through every rulebook in order; the matches and clears they produce."""
        matches: list[Match] = []
        quarantined: list[tuple[Event, str]] = []
        with self._lock:
            self._clears = []
            started, watermark = time.perf_counter(), self._watermark
            for event in events:
                if not self._isolate:
                    matches += self._evaluate_with_absences(event)
                    continue
                try:
                    matches += self._evaluate_with_absences(event)
                except Exception as exc:  # noqa: BLE001  # a poison event is set aside; the batch goes on
                    log.exception("evaluating event %r failed; it is quarantined", event.id)
                    quarantined.append((event, f"evaluating it failed: {type(exc).__name__}: {exc}"[:2000]))
            matches += self._absences(self._watermark)
            matches += self.slo.catch_up(self._watermark, self._clears)
            self._expire()
            clears, self._clears = self._clears, []
            if self._watermark > watermark:
                self._advanced_at = time.monotonic()
            if events:
                self._metrics.engine_batch_seconds.observe(time.perf_counter() - started)
        return EngineResult(tuple(events), tuple(matches), tuple(clears), sli=self.slo.drain(),
                            quarantined=tuple(quarantined))

    def _evaluate_with_absences(self, event: Event) -> list[Match]:
        timestamp = self._clamped(event.timestamp)  # a datetime conversion: done once per event, not per use
        matches = []
        if timestamp > self._watermark and self._windows.absence_due(timestamp):
            matches += self._absences(timestamp)  # silences that ended before this event are due first
        return matches + self._evaluate_one(event, timestamp)

    def _clamped(self, timestamp: float) -> float:
        """The event time as the stream clock may see it: never beyond the wall clock + max_ahead_s."""
        if self._max_ahead_s is None:
            return timestamp
        return min(timestamp, self._wall_clock() + self._max_ahead_s)

    @property
    def watermark(self) -> float:
        """The newest event time evaluated (0 before the first event)."""
        return self._watermark

    def tick(self, now: float) -> list[Match]:
        """Absence checks at event time `now` (between batches; batches check at their own event times)."""
        with self._lock:
            return self._absences(max(now, self._watermark))

    def stream_time(self, monotonic_now: float) -> float | None:
        """The live stream's event time now, as the clock runs it on (Clock.stream_time) from the newest event
        time and how long ago it arrived; None before the first event."""
        with self._lock:
            if not self._watermark:
                return None
            return self._clamped(self._clock.stream_time(self._watermark, monotonic_now - self._advanced_at))

    def _absences(self, now: float) -> list[Match]:
        return [build_absence_match(self._scopes[scope], rule, last, silence, now, self._renderer)
                for scope, rule, last, silence in self._windows.absent(now) if scope in self._scopes]

    def _evaluate_one(self, event: Event, timestamp: float) -> list[Match]:
        if timestamp < self._watermark - self._lateness:
            self._metrics.late_events.inc()
        self._watermark = max(self._watermark, timestamp)
        matches: list[Match] = []
        for unit in self._by_kind.get(event.kind, ()):
            if not unit.prefilter.may_match(event):
                continue
            for action in self._match_fact(unit, self._fact(event, unit, timestamp)):
                match = self._on_fire(unit.plan, action, event)
                if match is not None:
                    matches.append(match)
        matches += self.slo.observe(event, timestamp, self._clears)
        return matches

    def _on_fire(self, unit: Plan, name: str, event: Event) -> Match | None:
        action: RuleAction = unit.actions[name]
        rule, when, scope = action.rule, action.rule.when, self._action_scopes[name]
        if action.alias == CLEAR_ALIAS:
            key = group_key(group_of(rule, [event]))
            self._clears.append(Clear(rule.id, unit.rulebook.name, key, event))
            return None
        if isinstance(when, SingleEvent):
            return build_match(unit.rulebook, rule, {"m": event}, self._renderer)
        if isinstance(when, Absence):
            self._windows.absence_event(scope, rule, action.alias, event)
            return None
        if isinstance(when, Count):
            counted = self._windows.count(scope, rule, event)
            if counted is None:
                return None
            evidence = {"m" if i == len(counted) - 1 else f"m{i}": e for i, e in enumerate(counted)}
            return build_match(unit.rulebook, rule, evidence, self._renderer)
        found = self._windows.correlate(scope, rule, action.alias, event)
        return None if found is None else build_match(unit.rulebook, rule, found, self._renderer)

    def _expire(self) -> None:
        self._windows.expire(self._watermark)

    def pending_facts(self) -> int:
        """Events still held for windows (for tests and the memory benchmark)."""
        return self._windows.held()


__all__ = ["EngineResult", "RuleEvaluator"]
