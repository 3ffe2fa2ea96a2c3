"""The rules engine: durable_rules' matcher, fed from one thread through a bounded queue.

Events become facts with ids this module owns, so every matching rule fires (an event would be consumed by
the first). Facts are retracted at once (the engine matches single facts); events that windowed rules may
still join are held in the runtime's windows until their window and the allowed lateness have passed, so the
engine's memory stays bounded.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuslo.engine import matcher
from gpuslo.engine.errors import EngineError, RulebookNotLoaded
from gpuslo.engine.events import ENVELOPE_FIELDS, Event
from gpuslo.engine.explain import SummaryRenderer, build_absence_match, build_match, group_key, group_of, text_test
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook.compile import CompiledRulebook, RuleAction, compile_rulebook, fact_key
from gpuslo.engine.rulebook.model import CLEAR_ALIAS, Absence, Count, Rule, Rulebook, SingleEvent
from gpuslo.engine.slo.counter import SliBatch, SloCounter, SloSeed
from gpuslo.engine.violations import Clear, Match
from gpuslo.engine.windows import Windows

log = logging.getLogger(__name__)
_SID = "0"
_FACT_ENVELOPE = frozenset({"id", "sid", "kind", "ts"})  # keys every fact has before its fields are copied
_IDLE_GRACE_S = 1.0  # how long the stream must be quiet before the live clock runs on by itself
_FACT_SERIAL = itertools.count()  # fact ids unique in the process: every ruleset shares one C core


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
class _FactFields:
    """The event fields a rulebook's facts copy, as (fact key, name), sorted by where the event keeps them."""

    envelope: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]  # name: the label's key
    attrs: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, unit: CompiledRulebook) -> _FactFields:
        fields = [(key, key.replace("__", ".")) for key in sorted(unit.keys) if key not in _FACT_ENVELOPE]
        return cls(tuple((key, name) for key, name in fields if name in ENVELOPE_FIELDS),
                   tuple((key, name[len("labels."):]) for key, name in fields if name.startswith("labels.")),
                   tuple((key, name) for key, name in fields
                         if name not in ENVELOPE_FIELDS and not name.startswith("labels.")))


@dataclass(frozen=True)
class _Unit:
    """A compiled rulebook, registered in the matcher, with the event fields its facts copy."""

    compiled: CompiledRulebook
    ruleset: matcher.Ruleset
    fields: _FactFields


def window_scope(rulebook: Rulebook, rule: Rule) -> str:
    """Where a rule's window state lives: the same for an unchanged rule across reloads of its rulebook."""
    fingerprint = hashlib.sha1(repr((rule.when, rule.group_by)).encode(), usedforsecurity=False).hexdigest()[:16]
    return f"{rulebook.name}|{rule.id}|{fingerprint}"


class RuleEvaluator:
    """Evaluates events against compiled rulebooks on the caller's thread (the engine thread, or a backtest)."""

    def __init__(self, *, lateness_s: float = 60.0, metrics: Metrics | None = None, measure_slos: bool = True,
                 max_ahead_s: float | None = None, isolate_events: bool = False,
                 wall_clock: Callable[[], float] = time.time):
        """`max_ahead_s`: the stream clock never runs ahead of `wall_clock()` by more (the live engine; None for
        backtests and rule tests, whose times are their own). `isolate_events`: an event whose evaluation raises
        is quarantined in the result instead of failing the batch."""
        self._max_ahead_s, self._isolate, self._wall_clock = max_ahead_s, isolate_events, wall_clock
        self._active: tuple[_Unit, ...] = ()
        self._clears: list[Clear] = []  # of the batch being evaluated
        self._windows = Windows(lateness_s)
        self._scopes: dict[str, Rulebook] = {}
        self._action_scopes: dict[str, str] = {}  # action → window scope, hashed once per load, not per firing
        self._watermark = 0.0
        self._advanced_at = 0.0  # time.monotonic() when the watermark last moved forward
        self._lateness = lateness_s
        self._metrics = metrics or Metrics()
        self._renderer = SummaryRenderer()
        self.slo = SloCounter(enabled=measure_slos)  # SLI counting and burn alerts (off for rule tests)
        self._lock = threading.RLock()

    @property
    def rulebooks(self) -> tuple[Rulebook, ...]:
        return tuple(unit.compiled.rulebook for unit in self._active)

    def load(self, rulebooks: Sequence[Rulebook], slo_seed: SloSeed | None = None) -> None:
        """Compile and register the rulebooks, then swap them in; on failure the old ones keep running.
        SLIs new to the evaluator start from `slo_seed` (the stored buckets)."""
        units = []
        for rulebook in rulebooks:
            try:
                compiled = compile_rulebook(rulebook, ruleset=matcher.unique_name(
                    f"{rulebook.name}@{rulebook.content_hash[:12]}"))
                ruleset = matcher.register(compiled.ruleset, compiled.definition_dict())
            except Exception as exc:  # noqa: BLE001 - named, so the service keeps that rulebook's last good version
                raise RulebookNotLoaded(rulebook.name, rulebook.location.file, f"{type(exc).__name__}: {exc}") from exc
            units.append(_Unit(compiled, ruleset, _FactFields.of(compiled)))
        scopes = {window_scope(unit.compiled.rulebook, rule): unit.compiled.rulebook
                  for unit in units for rule in unit.compiled.rulebook.rules}
        action_scopes = {name: window_scope(unit.compiled.rulebook, action.rule)
                         for unit in units for name, action in unit.compiled.actions.items()}
        with self._lock:
            self._active = tuple(units)
            self._windows.forget(set(self._scopes) - set(scopes))
            self._scopes = scopes
            self._action_scopes = action_scopes
            self.slo.load(rulebooks, slo_seed)

    def _fact(self, event: Event, unit: _Unit, timestamp: float) -> dict[str, Any]:
        fact: dict[str, Any] = {"id": f"f{next(_FACT_SERIAL)}", "sid": _SID, "kind": event.kind, "ts": timestamp}
        fields = unit.fields
        for key, name in fields.envelope:
            value = getattr(event, name)
            if value is not None:
                fact[key] = value
        for source, copied in ((event.labels, fields.labels), (event.attrs, fields.attrs)):
            for key, name in copied:
                value = source.get(name)
                if value is not None:
                    fact[key] = value
        for test in unit.compiled.text_tests:
            observed = event.get(test.field)
            if observed is not None:  # absent stays absent, so neither the test nor its negation holds
                fact[test.key] = 1 if text_test(test.op, observed, test.pattern) else 0
        return fact

    def facts(self, event: Event) -> list[tuple[matcher.Ruleset, dict[str, Any]]]:
        """The facts an event becomes, one per loaded rulebook that reads its kind (bench/engine.py's (a))."""
        return [(unit.ruleset, self._fact(event, unit, event.timestamp))
                for unit in self._active if event.kind in unit.compiled.kinds]

    def _match_fact(self, unit: _Unit, fact: dict[str, Any]) -> list[str]:
        """Assert the fact and retract it at once; the actions it fired (none when no rule pattern took it)."""
        for _attempt in range(3):
            text = matcher.encode(fact)
            try:
                fired = matcher.assert_fact(unit.ruleset, text)
            except matcher.IdCollision:
                # 32-bit id hash collision with a pending fact: re-key and count it, never drop silently.
                self._metrics.engine_errors.labels("observed_collision").inc()
                fact["id"] = f"f{next(_FACT_SERIAL)}"
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
        """The live stream's event time now: the newest event time, running on with the time elapsed since it
        arrived once the stream has been quiet for _IDLE_GRACE_S. None before the first event.

        Not the wall clock: events that arrive late or in bulk (an agent shipping its spool after an outage,
        a replay into a live server) would all look overdue against it. The grace keeps a stream that is
        still flowing on its own event time, so the gaps between batches cannot outrun the next batch.
        """
        with self._lock:
            if not self._watermark:
                return None
            return self._clamped(self._watermark + max(0.0, monotonic_now - self._advanced_at - _IDLE_GRACE_S))

    def _absences(self, now: float) -> list[Match]:
        return [build_absence_match(self._scopes[scope], rule, last, silence, now, self._renderer)
                for scope, rule, last, silence in self._windows.absent(now) if scope in self._scopes]

    def _evaluate_one(self, event: Event, timestamp: float) -> list[Match]:
        if timestamp < self._watermark - self._lateness:
            self._metrics.late_events.inc()
        self._watermark = max(self._watermark, timestamp)
        matches: list[Match] = []
        for unit in self._active:
            if event.kind not in unit.compiled.kinds:
                continue
            for action in self._match_fact(unit, self._fact(event, unit, timestamp)):
                match = self._on_fire(unit.compiled, action, event)
                if match is not None:
                    matches.append(match)
        matches += self.slo.observe(event, timestamp, self._clears)
        return matches

    def _on_fire(self, unit: CompiledRulebook, name: str, event: Event) -> Match | None:
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


__all__ = ["EngineResult", "RuleEvaluator", "fact_key"]
