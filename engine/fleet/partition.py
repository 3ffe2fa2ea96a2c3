"""One owned partition: rebuild its window state by replaying the stream without writing, then evaluate each
batch read from the stream and store its effects and its new offset in one transaction."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from sqlalchemy.orm import Session

from gpuslo.engine.errors import EventError, GpusloError
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.fleet import offsets
from gpuslo.engine.fleet.bus import Bus, Delivered, Reader
from gpuslo.engine.fleet.offsets import Offset
from gpuslo.engine.fleet.routing import Partition, longest_window
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.engine_output import Notify, write_output

log = logging.getLogger(__name__)
CLOCK_SKEW_S = 60.0  # how far a publisher's clock may run ahead of the NATS servers' (the replay starts earlier)
_RECENT = 100_000  # event ids a partition remembers, to evaluate a re-published event once


class LostPartition(GpusloError):
    """Another owner wrote this partition since we read its offset: we stop working on it."""


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
        self.evaluator = RuleEvaluator(lateness_s=settings.lateness_s, metrics=metrics)
        self.evaluator.load(self._rulebooks)
        self._clear_kinds = frozenset(r.lifecycle.resolve_when.kind for rb in self._rulebooks for r in rb.rules
                                      if r.lifecycle.resolve_when is not None)
        self._recent: OrderedDict[str, None] = OrderedDict()
        self.offset = Offset()
        self.replayed = 0
        self.reader: Reader | None = None

    def open(self) -> None:
        """Read the stored offset and rebuild the windows from the stream up to it; then read on after it."""
        with self._database.session(readonly=True) as session:
            self.offset = offsets.read(session, self.partition.name)
        if self.offset.seq:
            self._replay()
        self.reader = self._bus.reader(self.partition.subject, after=self.offset.seq)

    def _replay(self) -> None:
        """Evaluate, and throw away the output of, every message up to the stored sequence that a window may
        still hold: stored at or after (watermark − longest window − lateness − clock skew)."""
        horizon = longest_window(self._rulebooks) + self._settings.lateness_s + CLOCK_SKEW_S
        since = datetime.fromtimestamp(max(0.0, self.offset.watermark - horizon), UTC)
        reader = self._bus.reader(self.partition.subject, since=since)
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

    def handle(self, delivered: Sequence[Delivered]) -> int:
        """Evaluate a batch read from the stream and store it; with nothing read, check absences on the stream's
        running clock. Returns the messages handled. Raises LostPartition."""
        if not delivered:
            now = self.evaluator.stream_time(time.monotonic())
            matches = self.evaluator.tick(now) if now is not None else []
            if matches:
                assert now is not None
                self._store([EngineResult((), tuple(matches))], (), self.offset.seq, now)
            return 0
        events = self._fresh(self._events(delivered))
        self._store(self._evaluate(events), events, delivered[-1].seq, self.evaluator.watermark)
        return len(delivered)

    def _evaluate(self, events: Sequence[Event]) -> list[EngineResult]:
        """The batch's results in stream order: a result's clears are stored after all its matches, so an event
        that may clear a violation is evaluated on its own, between the runs of events around it (a match after
        a clear must reopen, not fold into what the clear then resolves)."""
        results, run = [], []
        for event in events:
            if event.kind in self._clear_kinds:
                if run:
                    results.append(self.evaluator.evaluate_batch(run))
                    run = []
                results.append(self.evaluator.evaluate_batch([event]))
            else:
                run.append(event)
        if run or not results:
            results.append(self.evaluator.evaluate_batch(run))
        return results

    def _store(self, results: Sequence[EngineResult], events: Sequence[Event], seq: int, clock: float) -> None:
        """Store the batch until it is stored (evaluating it again would feed the windows twice); a changed
        version means a new owner: LostPartition."""
        new = Offset(seq, max(self.offset.watermark, self.evaluator.watermark), max(self.offset.clock, clock),
                     self.offset.version + 1)
        delay = 0.2
        while True:
            try:
                with self._database.session(rederivable=True) as session:
                    self._write(session, results, events, new)
                self.offset = new
                return
            except LostPartition:
                raise
            except GpusloError:
                log.exception("partition %s: storing a batch failed; retrying in %.1fs", self.partition.name, delay)
                self._metrics.engine_errors.labels("store").inc()
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _write(self, session: Session, results: Sequence[EngineResult], events: Sequence[Event],
               new: Offset) -> None:
        now = datetime.now(UTC)
        if not offsets.advance(session, self.partition.name, self.offset.version, new, self._owner, now):
            raise LostPartition(f"partition {self.partition.name}: written by another owner since version "
                                f"{self.offset.version}")
        if events:
            repository.store_events(session, events, now=now)  # the event log and the evidence rows' targets
        for result in results:
            write_output(session, result, now, self._notify)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
