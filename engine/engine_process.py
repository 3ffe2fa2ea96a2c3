"""The engine in a process of its own (setting `engine_process`): ingest and the web in one process, evaluation,
its store writes and the outbox rows in a child, so that the two use two cores instead of sharing one GIL.

The durable queue is the events table: ingest stores each event (processed_at NULL) and commits before it
acks; the engine marks events processed in the transaction that stores what they produced. After the commit
ingest hands the new events' canonical bodies (the stored text, built before the transaction anyway) to a
sender thread, which writes them to the child over a socket; the child parses them and queues them as the
embedded engine's queue does. Whatever does not reach the child's queue (the sender's bound or the child's queue
full, a child that died or is starting) stays stored and unprocessed, and the child reads it back oldest first
(the refill the embedded engine uses after an overflow or a restart), queueing nothing newer until then. So an
acked event survives kill -9 of either process, and a killed child's batch is rolled back whole and evaluated
once by the next child. The parent supervises: a child
that dies is started again (with back-off), /healthz reports it, and close() stops it cleanly.

The parent keeps an engine that is loaded but never started: it validates each rulebook load (a refused
rulebook keeps its running version, as embedded) and says which SLIs run; the child loads exactly the
rulebooks the parent chose, sent over the control socket.
"""

from __future__ import annotations

import copyreg
import gc
import io
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import orjson
from sqlalchemy import text

from gpuslo.engine.config import Settings
from gpuslo.engine.engine_health import STALE_S, EngineHealth
from gpuslo.engine.engine_thread import Runtime
from gpuslo.engine.errors import EventError
from gpuslo.engine.events import Event, parse_event
from gpuslo.engine.metrics import Metrics
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import EngineResult, RuleEvaluator
from gpuslo.engine.slo.counter import SloSeed
from gpuslo.engine.store import repository
from gpuslo.engine.store.db import Database

log = logging.getLogger(__name__)
_GC_THRESHOLDS = (2000, 10, 100)  # cli/serve.py's GC_THRESHOLDS (not imported: that pulls in the web)
_REPORT_S = 0.5  # the child reports its health this often
_UNPROCESSED = text("SELECT 1 FROM events WHERE processed_at IS NULL LIMIT 1")
Done = Callable[[Sequence[str], Sequence[str], float], None]


def _mappingproxy(mapping: dict[Any, Any]) -> types.MappingProxyType[Any, Any]:
    return types.MappingProxyType(mapping)


class _Pickler(pickle.Pickler):
    """Rulebooks hold read-only mappings, which pickle does not know; they travel as dicts."""

    dispatch_table = copyreg.dispatch_table.copy()
    dispatch_table[types.MappingProxyType] = lambda m: (_mappingproxy, (dict(m),))


def _dumps(value: object) -> bytes:
    out = io.BytesIO()
    _Pickler(out).dump(value)
    return out.getvalue()


def clock() -> float:
    """CLOCK_MONOTONIC: one time line for both processes."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class EngineProcess:
    """The parent's side: what the core calls on its engine (load, start, submit, health, wait_idle, stop)."""

    def __init__(self, settings: Settings, database: Database, metrics: Metrics):
        self._settings, self._database, self._metrics = settings, database, metrics
        self.evaluator = RuleEvaluator(metrics=None)  # validates loads and tells the SLIs; never evaluates
        self._rulebooks: tuple[Rulebook, ...] = ()
        self._lock = threading.Lock()  # the control socket's sends
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: Connection | None = None
        # Bodies waiting for the sender thread; past the engine queue's size they are dropped (they are stored)
        # and the child is told to read the backlog first.
        self._pending: list[str] = []
        self._overflow = False
        self._ready = threading.Condition()
        self._report: tuple[float, bool, str | None, int] | None = None  # (at, ok, reason, queue depth)
        self._crash: str | None = None
        self._stop = threading.Event()
        self._report_done = False
        self._loads, self._loaded_seq = 0, 0
        self._loaded = threading.Condition()
        self.on_done: Done | None = None  # bench/: (evaluated ids, ids that raised a match, commit time)
        self._supervisor = threading.Thread(target=self._supervise, name="gpuslo-engine-process", daemon=True)
        self.restarts = 0

    def load(self, rulebooks: Sequence[Rulebook], slo_seed: SloSeed | None = None) -> None:
        """Validate in this process (a RulebookNotLoaded goes to the caller), then load in the child."""
        self.evaluator.load(rulebooks)
        with self._lock:
            self._rulebooks = tuple(rulebooks)
            self._loads += 1
            wanted = self._loads
            sent = self._send(("load", wanted, self._rulebooks))
        with self._loaded:  # as embedded, the load is in force when this returns (unless the child is down)
            if sent and not self._loaded.wait_for(lambda: self._loaded_seq >= wanted or self._crash is not None,
                                                  timeout=30):
                log.warning("the engine process did not confirm a rulebook load within 30 s")

    def start(self, ready_s: float = 30.0) -> None:
        """Start the child and wait (up to `ready_s`) for its first report, so that a core that is open
        evaluates, as embedded; events ingested before that are stored and read back by the child."""
        self._spawn()
        self._supervisor.start()
        threading.Thread(target=self._send_events, name="gpuslo-engine-feed", daemon=True).start()
        deadline = time.monotonic() + ready_s
        while self._report is None and self._crash is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def report_done(self, on_done: Done) -> None:
        """Ask the child to report every stored batch (bench/engine.py's latency); off unless asked."""
        self.on_done = on_done
        with self._lock:
            self._report_done = True
            self._send(("report_done",))

    def submit(self, events: Sequence[Event]) -> int:
        """Hand stored events to the child (ingest passes the bodies it stored to submit_bodies instead)."""
        return self.submit_bodies(repository.event_bodies(events)) if events else 0

    def submit_bodies(self, bodies: Sequence[str]) -> int:
        """Queue the canonical bodies of stored events for the child; never blocks on the child. Returns how
        many were queued (the others are read back from the database)."""
        if not bodies:
            return 0
        with self._ready:
            if len(self._pending) + len(bodies) > self._settings.engine_queue_size:
                self._pending.clear()  # all of them stay stored: the child reads them back in order
                self._overflow = True
                self._ready.notify()
                return 0
            self._pending += bodies
            self._ready.notify()
        return len(bodies)

    def _send_events(self) -> None:
        """The sender thread: pending bodies to the child, one message per wake-up, as a JSON array."""
        while not self._stop.is_set():
            with self._ready:
                self._ready.wait_for(lambda: self._pending or self._overflow or self._stop.is_set(), timeout=1.0)
                bodies, overflow = self._pending, self._overflow
                self._pending, self._overflow = [], False
            if not (bodies or overflow):
                continue
            payload = b"E" + (b"P" if overflow else b"-") + ("[" + ",".join(bodies) + "]").encode()
            with self._lock:
                self._send_raw(payload)

    def health(self) -> EngineHealth:
        proc, report, crash = self._proc, self._report, self._crash
        if proc is None:
            return EngineHealth(False, "engine process has not started")
        if proc.poll() is not None or crash is not None:
            return EngineHealth(False, f"engine process exited and is being restarted: {crash or proc.returncode}")
        if report is None:
            return EngineHealth(False, "engine process is starting")
        at, ok, reason, _depth = report
        if clock() - at > STALE_S:
            return EngineHealth(False, f"engine process has not reported for {clock() - at:.1f} s")
        return EngineHealth(ok, reason)

    @property
    def running(self) -> bool:
        return self.health().ok

    def queue_depth(self) -> int:
        return self._report[3] if self._report else 0

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """True once no stored event is left unevaluated (processed_at is set in the transaction that stores
        what the event produced, so nothing of it is still being written)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._database.session(readonly=True) as session:
                if session.execute(_UNPROCESSED).first() is None:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._ready:
            self._ready.notify_all()
        with self._lock:
            self._send(("stop",))
        proc = self._proc
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("engine process %d did not stop within %.0f s; killing it", proc.pid, timeout)
                proc.kill()
                proc.wait()
        if self._supervisor.is_alive():
            self._supervisor.join(timeout)
        with self._lock:
            self._close_pipes()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    # The child's lifecycle.

    def _send(self, message: tuple[object, ...]) -> bool:
        """Under self._lock. A child that is gone misses it; the next one gets the state at its start."""
        return self._send_raw(_dumps(message))

    def _send_raw(self, data: bytes) -> bool:
        if self._control is not None and self._crash is None:
            try:
                self._control.send_bytes(data)
                return True
            except OSError:
                pass
        return False

    def _spawn(self) -> None:
        parent_end, child_end = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            proc = subprocess.Popen([sys.executable, "-m", "gpuslo.engine.engine_process", str(child_end.fileno())],
                                    pass_fds=(child_end.fileno(),), env=env)
        finally:
            child_end.close()
        with self._lock:
            self._close_pipes()
            self._proc, self._control = proc, Connection(parent_end.detach())
            self._report, self._crash = None, None
            self._send(("start", self._settings, self._loads, self._rulebooks, self._report_done))

    def _close_pipes(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    def _supervise(self) -> None:
        """Read the child's reports; start a new child when it dies, with back-off."""
        delay = 0.5
        while not self._stop.is_set():
            started = time.monotonic()
            self._read_reports()
            if self._stop.is_set():
                return
            proc = self._proc
            code = proc.wait() if proc is not None else None
            with self._loaded:
                self._crash = f"exit status {code}"
                self._loaded.notify_all()
            self.restarts += 1
            self._metrics.engine_restarts.inc()
            log.error("engine process exited (%s); starting a new one in %.1f s", self._crash, delay)
            delay = 0.5 if time.monotonic() - started > 30 else delay
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, 10.0)
            self._spawn()

    def _read_reports(self) -> None:
        control = self._control
        while control is not None:
            try:
                message = pickle.loads(control.recv_bytes())
            except (EOFError, OSError):
                return
            if message[0] == "health":
                _, ok, reason, depth = message
                self._report = (clock(), ok, reason, depth)
                self._metrics.engine_queue_depth.set(depth)
            elif message[0] == "loaded":
                with self._loaded:
                    self._loaded_seq = max(self._loaded_seq, message[1])
                    self._loaded.notify_all()
            elif message[0] == "done" and self.on_done is not None:
                self.on_done(*message[1:])


# The child.

def _child(control: Connection) -> None:
    from gpuslo.engine.alerts import load_alerts_config
    from gpuslo.engine.services.changes import Notifier
    from gpuslo.engine.services.slos import Slos
    from gpuslo.engine.store.engine_io import EngineStore

    kind, settings, loads, rulebooks, report_done = pickle.loads(control.recv_bytes())
    assert kind == "start"
    database = Database(settings.database_url)
    metrics = Metrics()
    alerts = load_alerts_config(settings.alerts_config) if settings.alerts_config else None
    runtime: Runtime | None = None
    slos = Slos(database, lambda: runtime.evaluator.slo.slis if runtime else ())
    store = EngineStore(database, metrics, Notifier(alerts, settings.public_url), slos.burn_rules)
    sends = threading.Lock()
    reporting = [report_done]

    def send(message: tuple[object, ...]) -> None:
        with sends:
            control.send_bytes(pickle.dumps(message))

    def sink(result: EngineResult) -> None:
        store.record(result)
        if reporting[0] and result.events:
            ids = {e.id for e in result.events}
            raised = {e.id for m in result.matches for e in m.explanation.evidence if e.id in ids}
            send(("done", [e.id for e in result.events], sorted(raised), clock()))

    runtime = Runtime(sink=sink, queue_size=settings.engine_queue_size, metrics=metrics, refill=store.refill,
                      max_ahead_s=settings.max_clock_skew_seconds, quarantine=store.quarantine)
    runtime.load(rulebooks, slos.stored_buckets)
    # What `gpuslo serve` does once it is up (cli/serve.py, tune_gc_after_startup): the start-up objects out of
    # the cyclic GC's scans, and collections less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    runtime.start()  # it reads the stored, unevaluated events first
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(_REPORT_S):
            health = runtime.health()
            try:
                send(("health", health.ok, health.reason, runtime.queue_depth()))
            except OSError:
                stop.set()

    threading.Thread(target=report, daemon=True).start()
    health = runtime.health()
    send(("loaded", loads))
    send(("health", health.ok, health.reason, 0))
    while not stop.is_set():
        try:
            data = control.recv_bytes()
        except (EOFError, OSError):  # the parent is gone
            break
        if data[:1] == b"E":
            _queue_bodies(runtime, data)
            continue
        message = pickle.loads(data)
        if message[0] == "stop":
            break
        if message[0] == "load":
            try:
                runtime.load(message[2], slos.stored_buckets)
            except Exception:  # noqa: BLE001  # the parent loaded the same rulebooks; keep what runs
                log.exception("engine process: loading the rulebooks the parent chose failed")
            send(("loaded", message[1]))
        elif message[0] == "report_done":
            reporting[0] = True
    stop.set()
    runtime.stop()
    database.dispose()


def _queue_bodies(runtime: Runtime, data: bytes) -> None:
    """Queue the events of one message from the parent: b"E", b"P" (read the backlog first) or b"-", and the
    stored bodies as a JSON array. A body that does not parse (it was checked at ingest) is read back by the
    refill, which quarantines it."""
    if data[1:2] == b"P":
        runtime.poke()
    events, unreadable = [], False
    for body in orjson.loads(data[2:]):
        try:
            events.append(parse_event(body))
        except EventError:
            unreadable = True
    if unreadable:
        runtime.poke()
    runtime.submit(events)


def main(argv: Sequence[str]) -> int:
    # Ctrl-C reaches the whole process group; the parent decides when the engine stops (close() sends "stop").
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s engine-process %(levelname)s %(name)s: %(message)s")
    _child(Connection(int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
