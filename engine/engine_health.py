"""What /healthz says about the engine thread: whether it is evaluating, and if not, why.

The engine loop beats at least every 0.5 s while it waits for events; a beat older than STALE_S, a crash the
supervisor is restarting from, or results it cannot store all mean "not evaluating", with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

STALE_S = 3.0  # with a beat every 0.5 s at most, /healthz turns to 503 within 5 s of the loop stopping


@dataclass(frozen=True)
class EngineHealth:
    """`ok` when the engine is evaluating; otherwise `reason` says why not."""

    ok: bool
    reason: str | None = None


class HealthState:
    """Written by the engine thread, read by /healthz."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._beat = clock()
        self._crash: str | None = None
        self._store_error: str | None = None
        self._started = False

    def beat(self) -> None:
        with self._lock:
            self._beat, self._crash, self._started = self._clock(), None, True

    def crashed(self, reason: str) -> None:
        with self._lock:
            self._crash = reason

    def storing_failed(self, reason: str | None) -> None:
        with self._lock:
            self._store_error = reason

    def report(self, alive: bool) -> EngineHealth:
        with self._lock:
            if not self._started:
                return EngineHealth(False, "engine thread has not started")
            if not alive:
                return EngineHealth(False, "engine thread is not running")
            if self._crash is not None:
                return EngineHealth(False, f"engine loop failed and is being restarted: {self._crash}")
            if self._store_error is not None:
                return EngineHealth(False, f"engine cannot store its results: {self._store_error}")
            idle = self._clock() - self._beat
            if idle > STALE_S:
                return EngineHealth(False, f"engine loop has not advanced for {idle:.1f} s")
        return EngineHealth(True)
