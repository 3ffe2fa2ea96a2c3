"""One owned partition: rebuild its window state by replaying the stream without writing, then evaluate each
batch read from the stream and store its effects and its new offset in one transaction.

The stream is the fleet's event log: by default a partition stores in PostgreSQL only the events its output cites
(the evidence of its matches, the events that clear a violation, the events set aside with an error), which the
evidence rows and the violation pages need; `store_events="all"` stores every event it reads as well, as the
embedded core does."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import orjson
from sqlalchemy import bindparam, text, update
from sqlalchemy.orm import Session

from gpuslo.engine.errors import ConfigError, EventError, GpusloError, TransactionConflict
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.explain import SummaryRenderer
from gpuslo.engine.fleet import offsets, output, poison, publish, slis
from gpuslo.engine.fleet.bus import Bus, Delivered, Reader
from gpuslo.engine.fleet.offsets import Offset
from gpuslo.engine.fleet.routing import Partition, longest_window
from gpuslo.engine.fleet.step_events import StepEvents
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.slo import store as slo_store
from gpuslo.engine.slo.counter import SliBatch
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database
from gpuslo.engine.store.engine_output import Notify, record_result
from gpuslo.engine.store.models import EventRow

log = logging.getLogger(__name__)
CLOCK_SKEW_S = 60.0  # how far a publisher's clock may run ahead of the NATS servers' (the replay starts earlier)
STORE_EVENTS = ("evidence", "all")  # what a partition stores of the events it reads (module docstring)


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
    """A partition's evaluated batch waiting to be stored: its results (each with the batch's events), the offset
    storing it moves the partition to, how many events it evaluated, and whether every one of them is stored
    (`store_events="all"`) or only those the rows cite (output.py)."""

    runner: PartitionRunner
    results: list[EngineResult]
    offset: Offset
    evaluated: int = 0
    store_all: bool = False


@dataclass(frozen=True)
class PartitionSettings:
    """`batch`: stream messages per fetch (a message holds one publish's events of one subject);
    `store_events`: "evidence" (only the events the output cites) or "all" (module docstring); `recent_ids`:
    event ids remembered to evaluate a re-published event once; `duplicate_window_s`: the stream's, which the
    replay covers at least so that the memory holds every id a publisher may still retry."""

    lateness_s: float = 60.0
    batch: int = 256
    store_events: str = "evidence"
    recent_ids: int = 100_000
    duplicate_window_s: float = 300.0

    def __post_init__(self) -> None:
        if self.store_events not in STORE_EVENTS:
            raise ConfigError(f"fleet store_events: one of {', '.join(STORE_EVENTS)}, got {self.store_events!r}")
        if self.batch < 1 or self.recent_ids < 1:
            raise ConfigError(f"fleet partition settings: batch and recent_ids must be >= 1, got {self.batch} and "
                              f"{self.recent_ids}")


class PartitionRunner:
    """The evaluator and stream reader of one partition, owned by this worker."""

    def __init__(self, partition: Partition, rulebooks: Sequence[Rulebook], *, bus: Bus, database: Database,
                 owner: str, notify: Notify, metrics: Metrics, settings: PartitionSettings,
                 renderer: SummaryRenderer | None = None):
        self.partition = partition
        self._rulebooks = tuple(rulebooks)
        self._bus = bus
        self._database = database
        self._owner = owner
        self._notify = notify
        self._metrics = metrics
        self._settings = settings
        self.evaluator = RuleEvaluator(lateness_s=settings.lateness_s, metrics=metrics, isolate_events=True,
                                       renderer=renderer)  # the worker's: a summary compiles once per worker
        self.evaluator.load(self._rulebooks)
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
        still hold, or a publisher may still re-publish within the duplicate window: stored at or after
        (watermark − max(longest window + lateness, duplicate window) − clock skew)."""
        horizon = max(longest_window(self._rulebooks) + self._settings.lateness_s,
                      self._settings.duplicate_window_s) + CLOCK_SKEW_S
        since = datetime.fromtimestamp(max(0.0, self.offset.watermark - horizon), UTC)
        reader = self._bus.reader(self.partition.subject, since=since)
        self.evaluator.slo.replaying(True)  # the stored counts are seeded already
        try:
            while True:
                delivered = [d for d in reader.fetch(self._settings.batch, 2.0) if d.seq <= self.offset.seq]
                if not delivered:
                    break
                self.evaluator.evaluate_batch(self._fresh(self._events(delivered)))
                self.replayed += len(delivered)
                if delivered[-1].seq >= self.offset.seq:
                    break
        finally:
            self.evaluator.slo.replaying(False)
            reader.close()
        self.evaluator.tick(self.offset.clock)  # absences stored by the last owner up to its clock: already out

    def _events(self, delivered: Sequence[Delivered], built: StepEvents | None = None) -> list[Event]:
        """The events of the messages, in order (publish.decode), each built by `built` (the worker step's: an
        event another partition of the step built is reused) or parse_event; what is not a valid event is
        logged, counted and skipped."""
        build = parse_event if built is None else built.build
        events = []
        for item in delivered:
            try:
                objects = publish.decode(item.data)
            except orjson.JSONDecodeError as exc:  # a bad publisher: skip it, never stop the partition
                self._bad(item.seq, exc)
                continue
            for obj in objects:
                try:
                    events.append(build(obj))
                except EventError as exc:
                    self._bad(item.seq, exc)
        return events

    def _bad(self, seq: int, error: Exception) -> None:
        log.error("partition %s: stream message %d holds what is not a valid event: %s", self.partition.name, seq,
                  error)
        self._metrics.engine_errors.labels("bus_event").inc()

    def _fresh(self, events: Sequence[Event]) -> list[Event]:
        """Events this partition has not evaluated yet (a re-publish after the duplicate window is skipped)."""
        fresh = []
        for event in events:
            if event.id in self._recent:
                continue
            self._recent[event.id] = None
            fresh.append(event)
        while len(self._recent) > self._settings.recent_ids:
            self._recent.popitem(last=False)
        return fresh

    def evaluate(self, delivered: Sequence[Delivered], built: StepEvents | None = None) -> Pending | None:
        """Evaluate a batch read from the stream (its events built by `built`, the worker step's, when given);
        with nothing read, check absences on the stream's running clock. What to store, with the offset it
        moves the partition to; None when there is nothing to store."""
        if not delivered:
            now = self.evaluator.stream_time(time.monotonic())
            matches = self.evaluator.tick(now) if now is not None else []
            if not matches:
                return None
            assert now is not None
            return Pending(self, [EngineResult((), tuple(matches))], self._next(self.offset.seq, now))
        events = self._fresh(self._events(delivered, built))
        return Pending(self, [self.evaluator.evaluate_batch(events)],
                       self._next(delivered[-1].seq, self.evaluator.watermark), len(events),
                       self._settings.store_events == "all")

    def _next(self, seq: int, clock: float) -> Offset:
        return Offset(seq, max(self.offset.watermark, self.evaluator.watermark), max(self.offset.clock, clock),
                      self.offset.version + 1)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None


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
                stored = store_cited(database, waiting)
                with database.session(rederivable=True) as session:
                    quarantined = _write(session, waiting, owner, notify, burn_rules, stored)
            except LostPartition as exc:
                lost.append(exc.runner)
                waiting = [p for p in waiting if p.runner is not exc.runner]
                continue
            except TransactionConflict as exc:  # lost to another worker's transaction: no fault of the batches
                log.warning("storing %d partition batches: %s; retrying", len(waiting), exc)
                metrics.engine_errors.labels("store_conflict").inc()
                if stop is not None and stop.is_set():
                    raise StoreAbandoned(f"stopped while {len(waiting)} partition batch(es) waited to be "
                                         f"stored again; their offsets stay at the last stored batch") from exc
                time.sleep(random.uniform(0.01, 0.1))  # PostgreSQL aborted one side; the other goes on
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
        except TransactionConflict as exc:  # not the batch's fault: stored whole again later
            log.warning("partition %s: %s; retrying", item.runner.partition.name, exc)
            metrics.engine_errors.labels("store_conflict").inc()
            remaining.append(item)
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


def _advance(session: Session, pending: Sequence[Pending], owner: str, now: datetime) -> None:
    """Move each partition to its new offset (LostPartition if another owner wrote it)."""
    refused = offsets.advance_all(session, [(item.runner.partition.name, item.runner.offset.version, item.offset)
                                            for item in pending], owner, now)
    for item in pending:
        if item.runner.partition.name in refused:
            raise LostPartition(item.runner)


def _prepare(session: Session, pending: Sequence[Pending]) -> tuple[list[EngineResult], list[Event]]:
    """The results as stored (output.effective) and the events to store before them."""
    results = output.effective(session, [r for item in pending for r in item.results],
                               store_all=any(item.store_all for item in pending))
    everything = [event for item in pending if item.store_all for r in item.results for event in r.events]
    return results, output.cited(results, everything)


_EVENTS = EventRow.__table__
_MARK_NEW = (update(_EVENTS).where(_EVENTS.c.id.in_(bindparam("ids", expanding=True)), _EVENTS.c.processed_at.is_(None))
             .values(processed_at=bindparam("at")))


def store_cited(database: Database, pending: Sequence[Pending]) -> set[str]:
    """Store the events the batches' rows will cite, marked processed, in a short transaction of their own that
    commits before the batches' transaction begins; returns their ids.

    Why: partitions of different key spaces cite the same event (a host's and an endpoint's copy of it), and an
    insert or update that meets another transaction's uncommitted row of that id waits for that whole
    transaction. In the batch transaction that was another worker's whole batch (seconds at 8 workers); here it
    is at most another worker's short store. Events are immutable and keyed by id (ON CONFLICT DO NOTHING), so an
    event stored here whose batch then fails, or whose partition another owner took meanwhile, is harmless: the
    batch's next reader stores it again as a duplicate and cites it; until then nothing cites it, as with
    `store_events="all"`. Only rows still unprocessed (those this transaction inserted) are marked, so no row
    another worker stored is locked. The batch transaction (offsets with violations, evidence, history, outbox:
    the exactly-once part) rechecks which events it cites and stores any missing here itself (a clear whose
    violation opened between the two transactions)."""
    now = datetime.now(UTC)
    with database.session(rederivable=True) as session:
        _results, events = _prepare(session, pending)
        if events:
            repository.store_events(session, events, now=now)
            ids = sorted(e.id for e in events)
            for start in range(0, len(ids), 1000):
                session.execute(_MARK_NEW, {"ids": ids[start:start + 1000], "at": now})
    return {event.id for event in events}


def _write(session: Session, pending: Sequence[Pending], owner: str, notify: Notify,
           burn_rules: Sequence[str], stored: set[str] | frozenset[str] = frozenset()) -> list[poison.Quarantined]:
    """The batches whole; the events whose evaluation raised are stored with their error and come back.
    `stored`: the ids store_cited stored and marked processed (no row of theirs is written here)."""
    now = datetime.now(UTC)
    _advance(session, pending, owner, now)
    results, events = _prepare(session, pending)
    missing = [event for event in events if event.id not in stored]
    if missing:
        repository.store_events(session, missing, now=now)  # what the evidence rows, clears and errors cite
    for result in results:  # the SLI counts of all after every match (violations they open may be causes)
        record_result(session, replace(result, sli=None), now, notify, mark_processed=False)
    slo_store.record_sli(session, SliBatch.merge(r.sli for r in results), burn_rules)
    unmarked = {e.id for result in results for e in result.events if e.id not in stored} | {e.id for e in missing}
    repository.mark_processed(session, sorted(unmarked), now)
    return poison.evaluation_quarantined(results)


def _write_in_parts(session: Session, item: Pending, owner: str, notify: Notify,
                    burn_rules: Sequence[str]) -> tuple[list[poison.Quarantined], list[poison.Quarantined]]:
    """One partition's batch, one match or clear at a time (and its events one at a time if storing them all
    fails); (quarantined at evaluation, quarantined now: an event whose row is refused has none to mark)."""
    now = datetime.now(UTC)
    _advance(session, [item], owner, now)
    results, events = _prepare(session, [item])
    refused = poison.store_events(session, events, now) if events else []
    bad = poison.once([*refused, *poison.write_in_parts(session, results, events, now, notify)])
    # The counts are no part's fault: if they fail, the batch fails and is retried whole.
    slo_store.record_sli(session, SliBatch.merge(r.sli for r in results), burn_rules)
    repository.mark_processed(session, [e.id for e in events], now)
    evaluated = poison.evaluation_quarantined(results)
    poison.quarantine(session, [*evaluated, *bad], now)
    return evaluated, bad
