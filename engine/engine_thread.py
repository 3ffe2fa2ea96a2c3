"""The engine thread: events arrive through a bounded queue, are evaluated in batches by the RuleEvaluator and
their results go to the sink (the store). A supervisor restarts the loop after any failure; a poison event is
quarantined (its evaluation or the storing of what it produced raised) and the rest of its batch goes on;
`health()` tells /healthz whether the engine is evaluating.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from gpuslo.engine.clock import LIVE
from gpuslo.engine.engine_health import EngineHealth, HealthState
from gpuslo.engine.events import Event
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.slo.counter import SloSeed

log = logging.getLogger(__name__)
_BATCH = LIVE.batch_size
_RECENT = 100_000
# Adaptive batching: a batch that took longer than _LINGER_AFTER_S to evaluate and store means the engine
# is loaded; it then waits _LINGER_S before taking the next batch so that several POSTs share one transaction
# and one statement set. Light load (short batches) never waits. bench/RESULTS.md, (d).
_LINGER_AFTER_S = 0.004
_LINGER_S = 0.008


class Runtime:
    """Owns the engine thread; events arrive through a bounded queue and results go to `sink`."""

    def __init__(self, *, sink: Callable[[EngineResult], None], queue_size: int, metrics: Metrics,
                 refill: Callable[[], Sequence[Event]] | None = None, lateness_s: float = 60.0,
                 max_ahead_s: float | None = None,
                 quarantine: Callable[[Sequence[tuple[Event, str]]], None] | None = None):
        """`quarantine` marks poison events in the database (a part of a result that cannot be stored while the
        database answers); without it a result is retried whole until it is stored."""
        self.evaluator = RuleEvaluator(lateness_s=lateness_s, metrics=metrics, max_ahead_s=max_ahead_s,
                                       isolate_events=True, clock=LIVE)
        self._sink = sink
        self._quarantine = quarantine
        self.health_state = HealthState()
        self._refill = refill
        self._metrics = metrics
        self._queue: queue.Queue[Event] = queue.Queue(maxsize=queue_size)
        self._queued: set[str] = set()
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._backlog = refill is not None
        self._lock = threading.RLock()
        self._busy = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._supervise, name="gpuslo-engine", daemon=True)

    def load(self, rulebooks: Sequence[Rulebook], slo_seed: SloSeed | None = None) -> None:
        self.evaluator.load(rulebooks, slo_seed)

    def start(self) -> None:
        self._thread.start()

    def submit(self, events: Sequence[Event]) -> int:
        """Queue events in arrival order; those that do not fit stay in the database and are read back in order,
        and nothing is queued past them until then (it would be evaluated first). Returns how many were queued."""
        queued = 0
        with self._lock:
            for event in events:
                if self._backlog:  # stored events wait for the refill: this one is stored and is read after them
                    break
                if event.id in self._queued or event.id in self._recent:
                    continue
                try:
                    self._queue.put_nowait(event)
                except queue.Full:
                    self._backlog = self._refill is not None
                    break
                self._queued.add(event.id)
                queued += 1
            self._metrics.engine_queue_depth.set(self._queue.qsize())
        self._wake.set()
        return queued

    def poke(self) -> None:
        """New events are stored: read them back from the database (the engine process's queue is the events
        table; engine/engine_process.py)."""
        with self._lock:
            self._backlog = self._refill is not None
        self._wake.set()

    def health(self) -> EngineHealth:
        """Whether the engine is evaluating now, and if not, why (for /healthz)."""
        return self.health_state.report(self._thread.is_alive() and not self._stop.is_set())

    @property
    def running(self) -> bool:
        """Whether the engine is evaluating now (gpuslo_engine_up): the thread alive and not stalled."""
        return self.health().ok

    def queue_depth(self) -> int:
        return self._queue.qsize()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """True once the queue is empty, no backlog is left and no batch is being evaluated."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                idle = self._queue.empty() and not self._backlog and not self._busy.is_set()
            if idle:
                return True
            time.sleep(0.005)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take_batch(self) -> list[Event]:
        batch: list[Event] = []
        with self._lock:
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if batch:
                self._busy.set()
            elif self._backlog and self._refill is not None:
                self._backlog = False
                self._busy.set()
                backlog = self._refill()
                self._busy.clear()
                self.submit(backlog)
                if len(backlog) >= _BATCH:
                    self._backlog = True
        return batch

    def _supervise(self) -> None:
        """The engine thread: runs the loop and restarts it after any failure, never dying silently."""
        delay = 0.5
        while not self._stop.is_set():
            try:
                self._run()
            except BaseException as exc:  # noqa: BLE001  # the supervisor's whole job
                log.exception("engine loop failed; restarting it in %.1f s", delay)
                self._metrics.engine_restarts.inc()
                self.health_state.crashed(f"{type(exc).__name__}: {exc}"[:500])
                with self._lock:
                    self._read_back_from_database()  # what it held is read back from the database
                    self._busy.clear()
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, 10.0)
            else:
                return

    def _run(self) -> None:
        busy_s = 0.0  # how long the last batch took to evaluate and store
        while not self._stop.is_set():
            self.health_state.beat()
            if busy_s > _LINGER_AFTER_S and self._queue.qsize() < _BATCH:
                self._stop.wait(_LINGER_S)  # under load, let a few more POSTs arrive to share the batch's costs
            batch = self._take_batch()
            if not batch:
                self._check_absences()
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            started = time.perf_counter()
            try:
                fresh = [e for e in batch if e.id not in self._recent]
                result = self.evaluator.evaluate_batch(fresh)
                self._remember(e.id for e in fresh)  # evaluated once: windows already hold these events
                self._deliver(result)
            except Exception:
                # Evaluation itself failed: the events stay unprocessed in the database for a later refill.
                log.exception("engine batch failed; its events will be retried from the database")
                self._metrics.engine_errors.labels("batch").inc()
                with self._lock:
                    self._read_back_from_database()
                self._stop.wait(1.0)
            finally:
                with self._lock:
                    self._queued.difference_update(e.id for e in batch)
                    self._metrics.engine_queue_depth.set(self._queue.qsize())
                    self._busy.clear()
                busy_s = time.perf_counter() - started

    def _read_back_from_database(self) -> None:
        """After a failure: evaluate from the stored events, oldest first. The queue's events are stored too and
        are dropped here, or they would be evaluated before the older events of the failed batch."""
        if self._refill is None:
            return
        self._backlog = True
        while True:
            try:
                self._queued.discard(self._queue.get_nowait().id)
            except queue.Empty:
                return

    def _deliver(self, result: EngineResult) -> None:
        """Hand a result to the sink until it is stored: re-evaluating the events instead would feed the
        windows twice (counts and correlations would fire again), so only the storing is retried."""
        delay, failures = 0.5, 0
        while True:
            try:
                self._sink(result)
                self.health_state.storing_failed(None)
                return
            except Exception as exc:
                failures += 1
                log.exception("storing an engine result failed; retrying in %.1fs", delay)
                self._metrics.engine_errors.labels("store").inc()
                self.health_state.storing_failed(f"{type(exc).__name__}: {exc}"[:500])
                if failures >= 2 and self._quarantine is not None and self._store_in_parts(result):
                    self.health_state.storing_failed(None)
                    return
                if self._stop.wait(delay):
                    return  # shutting down: the events stay unprocessed and are evaluated after a restart
                delay = min(delay * 2, 30.0)

    def _store_in_parts(self, result: EngineResult) -> bool:
        """Store a result that keeps failing one match or clear at a time; the events of a part that fails are
        quarantined with its error. False (nothing stored) when the database does not answer: then nothing is
        poison, and the whole result is retried."""
        assert self._quarantine is not None
        try:
            self._quarantine([])  # does the database answer at all? If not, nothing here is poison
        except Exception:  # noqa: BLE001
            return False
        ids = {event.id for event in result.events}
        parts = [EngineResult((), (match,)) for match in result.matches]
        parts += [EngineResult((), (), (clear,)) for clear in result.clears]
        poison: dict[str, tuple[Event, str]] = {}
        for part in parts:
            try:
                self._sink(part)
            except Exception as exc:  # noqa: BLE001  # this part alone fails: its events are the poison
                cited = [e for m in part.matches for e in m.explanation.evidence if e.id in ids]
                cited += [c.event for c in part.clears if c.event.id in ids]
                for event in cited[-1:]:  # the event that made the part: the last evidence, or the clearing one
                    poison.setdefault(event.id, (event, f"storing what it produced failed: "
                                                        f"{type(exc).__name__}: {exc}"[:2000]))
        self._quarantine(list(poison.values()))  # the database answered a moment ago; a failure here goes up
        self._metrics.events_quarantined.labels("store").inc(len(poison))
        rest = tuple(e for e in result.events if e.id not in poison)
        self._sink(EngineResult(rest, (), (), sli=result.sli, quarantined=result.quarantined))
        return True

    def _check_absences(self) -> None:
        """The live clock's check between batches: absences at the stream's time, run on while it is quiet."""
        try:
            now = self.evaluator.stream_time(time.monotonic())
            matches = self.evaluator.tick(now) if now is not None else []
            if matches:
                self._sink(EngineResult((), tuple(matches)))
        except Exception:
            log.exception("absence check failed")
            self._metrics.engine_errors.labels("absence").inc()

    def _remember(self, ids: Any) -> None:
        for event_id in ids:
            self._recent[event_id] = None
        while len(self._recent) > _RECENT:
            self._recent.popitem(last=False)
