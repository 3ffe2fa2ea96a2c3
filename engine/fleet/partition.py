"""One owned partition: rebuild its window state by replaying the stream without writing, then evaluate each
batch read from the stream and store its effects and its new offset in one transaction."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from sqlalchemy import text
from sqlalchemy.orm import Session

from gpuslo.engine.errors import EventError, GpusloError
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.fleet import offsets, poison, slis
from gpuslo.engine.fleet.bus import Bus, Delivered, Reader
from gpuslo.engine.fleet.offsets import Offset
from gpuslo.engine.fleet.routing import Partition, longest_window
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.slo import store as slo_store
from gpuslo.engine.slo.counter import SliBatch
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.engine_output import Notify, record_result
from gpuslo.engine.violations import Clear, Match

log = logging.getLogger(__name__)
CLOCK_SKEW_S = 60.0  # how far a publisher's clock may run ahead of the NATS servers' (the replay starts earlier)
_RECENT = 100_000  # event ids a partition remembers, to evaluate a re-published event once


class StoreAbandoned(GpusloError):
    """The worker was told to stop while a batch could not be stored: nothing of it is stored, its partitions'
    offsets stay where they were, and their next owner reads the batch again."""


class LostPartition(GpusloError):
    """Another owner wrote this partition since we read its offset: we stop working on it."""

    def __init__(self, runner: PartitionRunner):
        super().__init__(f"partition {runner.partition.name}: written by another owner since version "
                         f"{runner.offset.version}")
        self.runner = runner


@dataclass(frozen=True)
class Pending:
    """A partition's evaluated batch waiting to be stored, and the offset storing it moves the partition to."""

    runner: PartitionRunner
    results: list[EngineResult]
    events: list[Event]
    offset: Offset


@dataclass(frozen=True)
class PartitionSettings:
    lateness_s: float = 60.0
    batch: int = 500


class PartitionRunner:
    """The evaluator and stream reader of one partition, owned by this worker."""

    def __init__(self, partition: Partition, rulebooks: Sequence[Rulebook], *, bus: Bus, database: Database,
                 owner: str, notify: Notify, metrics: Metrics, settings: PartitionSettings):
        self.partition = partition
        self._rulebooks = tuple(rulebooks)
        self._bus = bus
        self._database = database
        self._owner = owner
        self._notify = notify
        self._metrics = metrics
        self._settings = settings
        self.evaluator = RuleEvaluator(lateness_s=settings.lateness_s, metrics=metrics, isolate_events=True)
        self.evaluator.load(self._rulebooks)
        self._clear_kinds = frozenset(r.lifecycle.resolve_when.kind for rb in self._rulebooks for r in rb.rules
                                      if r.lifecycle.resolve_when is not None)
        self._recent: OrderedDict[str, None] = OrderedDict()
        self.offset = Offset()
        self.replayed = 0
        self.reader: Reader | None = None

    def open(self) -> None:
        """Read the stored offset and, in the same snapshot, the SLI counts of the partition's groups; seed the
        counter with them and rebuild the windows from the stream up to the offset; then read on after it."""
        with self._database.session(readonly=True) as session:
            if self._database.dialect == "postgresql":  # one snapshot for the offset and the counts it stands for
                session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
            self.offset = offsets.read(session, self.partition.name)
            state = slis.read_state(session, self.partition, self._rulebooks) if self.offset.seq else None
        if state is not None:
            self.evaluator.slo.seed(state.seed)
        if self.offset.seq:
            self._replay()
        if state is not None:
            self.evaluator.slo.restore_firing(state.firing)
        self.reader = self._bus.reader(self.partition.subject, after=self.offset.seq)

    def _replay(self) -> None:
        """Evaluate, and throw away the output of, every message up to the stored sequence that a window may
        still hold: stored at or after (watermark − longest window − lateness − clock skew)."""
        horizon = longest_window(self._rulebooks) + self._settings.lateness_s + CLOCK_SKEW_S
        since = datetime.fromtimestamp(max(0.0, self.offset.watermark - horizon), UTC)
        reader = self._bus.reader(self.partition.subject, since=since)
        self.evaluator.slo.replaying(True)  # the stored counts are seeded already
        try:
            while True:
                delivered = [d for d in reader.fetch(self._settings.batch, 2.0) if d.seq <= self.offset.seq]
                if not delivered:
                    break
                self._evaluate(self._fresh(self._events(delivered)))
                self.replayed += len(delivered)
                if delivered[-1].seq >= self.offset.seq:
                    break
        finally:
            self.evaluator.slo.replaying(False)
            reader.close()
        self.evaluator.tick(self.offset.clock)  # absences stored by the last owner up to its clock: already out

    def _events(self, delivered: Sequence[Delivered]) -> list[Event]:
        events = []
        for item in delivered:
            try:
                events.append(parse_event(orjson.loads(item.data)))
            except (EventError, orjson.JSONDecodeError) as exc:  # a bad publisher: skip it, never stop the partition
                log.error("partition %s: stream message %d is not a valid event: %s", self.partition.name,
                          item.seq, exc)
                self._metrics.engine_errors.labels("bus_event").inc()
        return events

    def _fresh(self, events: Sequence[Event]) -> list[Event]:
        """Events this partition has not evaluated yet (a re-publish after the duplicate window is skipped)."""
        fresh = []
        for event in events:
            if event.id in self._recent:
                continue
            self._recent[event.id] = None
            fresh.append(event)
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)
        return fresh

    def evaluate(self, delivered: Sequence[Delivered]) -> Pending | None:
        """Evaluate a batch read from the stream; with nothing read, check absences on the stream's running
        clock. What to store, with the offset it moves the partition to; None when there is nothing to store."""
        if not delivered:
            now = self.evaluator.stream_time(time.monotonic())
            matches = self.evaluator.tick(now) if now is not None else []
            if not matches:
                return None
            assert now is not None
            return Pending(self, [EngineResult((), tuple(matches))], [], self._next(self.offset.seq, now))
        events = self._fresh(self._events(delivered))
        results = self._evaluate(events)
        return Pending(self, results, events, self._next(delivered[-1].seq, self.evaluator.watermark))

    def _next(self, seq: int, clock: float) -> Offset:
        return Offset(seq, max(self.offset.watermark, self.evaluator.watermark), max(self.offset.clock, clock),
                      self.offset.version + 1)

    def _evaluate(self, events: Sequence[Event]) -> list[EngineResult]:
        """The batch's results in stream order. A result's clears are stored after all of its matches, so an
        event that may clear a violation is evaluated on its own, and a match that follows a clear of its
        violation starts a new result (it must reopen, not fold into what the clear then resolves)."""
        parts: list[EngineResult] = []
        run: list[Event] = []
        for event in events:
            if event.kind in self._clear_kinds:
                if run:
                    parts.append(self.evaluator.evaluate_batch(run))
                    run = []
                parts.append(self.evaluator.evaluate_batch([event]))
            else:
                run.append(event)
        if run or not parts:
            parts.append(self.evaluator.evaluate_batch(run))
        return _in_order(parts)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None


def _in_order(parts: Sequence[EngineResult]) -> list[EngineResult]:
    """Merge consecutive results into as few as keep stream order: a new one starts only where a match follows
    a clear of the same rule and group key. Events are left out (the batch marks them processed once); the
    events whose evaluation raised are kept, each in the result its part merged into.

    The SLI counts of every part are merged into the last result: stored after all matches, as the embedded engine
    stores a batch's (violations the batch opens may be charged with its bad requests). Each SLI is counted only
    in its own key space's partitions (routing.rulebooks_for), so an event copied to several spaces counts once."""
    merged: list[EngineResult] = []
    matches: list[Match] = []
    clears: list[Clear] = []
    quarantined: list[tuple[Event, str]] = []
    cleared: set[tuple[str, str]] = set()
    for part in parts:
        if cleared and any((m.rule_id, m.group_key) in cleared for m in part.matches):
            merged.append(EngineResult((), tuple(matches), tuple(clears), quarantined=tuple(quarantined)))
            matches, clears, quarantined, cleared = [], [], [], set()
        matches += part.matches
        clears += part.clears
        quarantined += part.quarantined
        cleared.update((c.rule_id, c.group_key) for c in part.clears)
    sli = SliBatch.merge(part.sli for part in parts)
    if matches or clears or quarantined or sli is not None:
        merged.append(EngineResult((), tuple(matches), tuple(clears), sli=sli, quarantined=tuple(quarantined)))
    return merged


def store_batches(database: Database, pending: Sequence[Pending], owner: str, notify: Notify, metrics: Metrics, *,
                  burn_rules: Sequence[str] = (), stop: threading.Event | None = None) -> list[PartitionRunner]:
    """Store the batches of several partitions in one transaction, each with its new offset, until stored (the
    windows already hold their events: evaluating again would feed them twice). A partition another owner wrote
    meanwhile is left out and returned (lost); the others are stored without it. After two failures, if the
    database answers, the batches are stored one partition at a time, and a partition's batch that alone fails
    one match or clear at a time (poison.py): the events of a part that fails are quarantined and the partition
    moves past them. While the database does not answer, nothing is poison: the batches are retried whole.
    `burn_rules`: the SLO burn alerts' rule ids (record_result); when `stop` is set while batches are still
    waiting, StoreAbandoned (nothing of them is stored, their offsets stay)."""
    waiting, lost = list(pending), list[PartitionRunner]()
    delay, failures = 0.2, 0
    while waiting:
        if failures >= 2 and poison.database_answers(database):
            waiting = _store_each(database, waiting, owner, notify, metrics, lost, burn_rules)
            if not waiting:
                break
        else:
            try:
                with database.session(rederivable=True) as session:
                    quarantined = _write(session, waiting, owner, notify, burn_rules)
            except LostPartition as exc:
                lost.append(exc.runner)
                waiting = [p for p in waiting if p.runner is not exc.runner]
                continue
            except Exception:  # noqa: BLE001  # any failure: retried, then split if the database answers
                log.exception("storing %d partition batches failed; retrying in %.1fs", len(waiting), delay)
                metrics.engine_errors.labels("store").inc()
                failures += 1
            else:
                _stored(waiting, quarantined, [], metrics)
                break
        if stop is None:
            time.sleep(delay)
        elif stop.wait(delay):
            raise StoreAbandoned(f"stopped while {len(waiting)} partition batch(es) could not be stored; their "
                                 f"offsets stay at the last stored batch")
        delay = min(delay * 2, 5.0)
    return lost


def _store_each(database: Database, waiting: Sequence[Pending], owner: str, notify: Notify, metrics: Metrics,
                lost: list[PartitionRunner], burn_rules: Sequence[str]) -> list[Pending]:
    """Store each partition's batch in its own transaction, and one that fails again in parts; the batches not
    stored (the database stopped answering meanwhile) come back. Lost partitions are added to `lost`."""
    remaining = []
    for item in waiting:
        try:
            with database.session(rederivable=True) as session:
                quarantined = _write(session, [item], owner, notify, burn_rules)
            _stored([item], quarantined, [], metrics)
            continue
        except LostPartition as exc:
            lost.append(exc.runner)
            continue
        except Exception:  # noqa: BLE001
            log.exception("partition %s: storing its batch alone failed; storing it in parts",
                          item.runner.partition.name)
            metrics.engine_errors.labels("store").inc()
        try:
            with database.session(rederivable=True) as session:
                quarantined, bad = _write_in_parts(session, item, owner, notify, burn_rules)
        except LostPartition as exc:
            lost.append(exc.runner)
            continue
        except Exception:  # noqa: BLE001  # not a part's fault (the offset, the events): retried whole later
            log.exception("partition %s: storing its batch in parts failed", item.runner.partition.name)
            metrics.engine_errors.labels("store").inc()
            remaining.append(item)
            continue
        _stored([item], quarantined, bad, metrics)
    return remaining


def _stored(pending: Sequence[Pending], evaluated: Sequence[poison.Quarantined],
            bad: Sequence[poison.Quarantined], metrics: Metrics) -> None:
    """After the commit: the partitions move to their new offsets; the quarantined events are counted."""
    for item in pending:
        item.runner.offset = item.offset
    if evaluated:
        metrics.events_quarantined.labels("evaluate").inc(len(evaluated))
    if bad:
        log.error("quarantined %d event(s) whose output could not be stored: %s", len(bad),
                  ", ".join(event.id for event, _error in bad))
        metrics.events_quarantined.labels("store").inc(len(bad))


def _advance(session: Session, pending: Sequence[Pending], owner: str, now: datetime) -> list[Event]:
    """Move each partition to its new offset (LostPartition if another owner wrote it); the batches' events."""
    for item in pending:
        if not offsets.advance(session, item.runner.partition.name, item.runner.offset.version, item.offset, owner,
                               now):
            raise LostPartition(item.runner)
    return [event for item in pending for event in item.events]


def _write(session: Session, pending: Sequence[Pending], owner: str, notify: Notify,
           burn_rules: Sequence[str]) -> list[poison.Quarantined]:
    """The batches whole; the events whose evaluation raised are stored with their error and come back."""
    now = datetime.now(UTC)
    events = _advance(session, pending, owner, now)
    if events:
        repository.store_events(session, events, now=now)  # the event log and the evidence rows' targets
    results = _in_order([result for item in pending for result in item.results])
    for result in results:
        record_result(session, result, now, notify, burn_rules)
    repository.mark_processed(session, [e.id for e in events], now)  # an embedded engine never redoes them
    evaluated = poison.evaluation_quarantined(results)
    poison.quarantine(session, evaluated, now)
    return evaluated


def _write_in_parts(session: Session, item: Pending, owner: str, notify: Notify,
                    burn_rules: Sequence[str]) -> tuple[list[poison.Quarantined], list[poison.Quarantined]]:
    """One partition's batch, one match or clear at a time (and its events one at a time if storing them all
    fails); (quarantined at evaluation, quarantined now: an event whose row is refused has none to mark)."""
    now = datetime.now(UTC)
    events = _advance(session, [item], owner, now)
    refused = poison.store_events(session, events, now) if events else []
    results = _in_order(item.results)
    bad = poison.once([*refused, *poison.write_in_parts(session, results, events, now, notify)])
    # The counts are no part's fault: if they fail, the batch fails and is retried whole.
    slo_store.record_sli(session, SliBatch.merge(r.sli for r in results), burn_rules)
    repository.mark_processed(session, [e.id for e in events], now)
    evaluated = poison.evaluation_quarantined(results)
    poison.quarantine(session, [*evaluated, *bad], now)
    return evaluated, bad
